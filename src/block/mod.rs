//! Outcome blocks: render and parse the fenced `sortie:success` / `sortie:failure` YAML blocks.
