//! Questions through the ticket (issue #34, in progress): the `sortie:question` block an
//! agent's question is posted as, and the answers people write back (`/answer <text>`,
//! `/answer 2` for the second option, or a `sortie:answer` block naming the question).
//!
//! Pure: rendering and parsing only. The pipeline does not post or read these yet; see
//! the note on issue #34 for what is left.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::markdown::{fences_named, sortie_marker};

/// A question an agent asked, as posted on the ticket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionBlock {
    /// Names the question in answers (`<role>-<attempt>-q<n>`).
    pub question_id: String,
    /// The role whose agent asked.
    pub role: String,
    /// The stage attempt that asked.
    pub stage_attempt: u32,
    /// Marks the comment as posted (the outbox's replay looks for it).
    pub idempotency_key: String,
    /// The question itself.
    pub question: String,
    /// The choices offered, if any (`/answer 2` picks the second).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Taken as the answer when the deadline passes unanswered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// When an unanswered question times out, if ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DateTime<Utc>>,
    /// What the agent found so far, and why it cannot choose.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context: String,
}

/// A person's answer to a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The answer's text (an option's text when picked by number).
    pub text: String,
}

/// Why a comment that looks like an answer is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAnAnswer {
    /// A `sortie:answer` block names another question.
    #[error("answers question {0}, not this one")]
    OtherQuestion(String),
    /// `/answer N` with N not one of the options.
    #[error("option {0} does not exist (the question offers {1})")]
    NoSuchOption(usize, usize),
    /// The answer is empty or its block unreadable.
    #[error("{0}")]
    Unreadable(String),
}

/// The comment sortie posts for `block`: the question as prose, how to answer, the block.
pub fn render_question_comment(block: &QuestionBlock) -> String {
    let mut out = format!("**{} asks:** {}\n\n", block.role, block.question.trim());
    if !block.context.trim().is_empty() {
        out.push_str(block.context.trim());
        out.push_str("\n\n");
    }
    for (i, option) in block.options.iter().enumerate() {
        out.push_str(&format!("{}. {option}\n", i + 1));
    }
    if !block.options.is_empty() {
        out.push('\n');
    }
    out.push_str("Answer with a comment whose first line is `/answer <your answer>`");
    if !block.options.is_empty() {
        out.push_str(" (or `/answer 2` for the second option)");
    }
    // A struct of strings, numbers and a timestamp always serializes.
    let yaml = serde_yaml::to_string(block).unwrap_or_default();
    // A fence longer than any run of backticks in the question, so none closes it.
    let longest = yaml.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    out.push_str(&format!(
        ".\n\n{fence}yaml sortie:question\n{yaml}{fence}\n"
    ));
    out
}

/// The longest question text [`one_line`] shows, in characters.
pub const ONE_LINE_CHARS: usize = 200;

/// A question and its options on one line, for a terminal line or a table cell (issue
/// #52): quoted, line breaks and control characters (a terminal escape an agent wrote)
/// as spaces, cut at [`ONE_LINE_CHARS`]; the options numbered as `/answer N` picks them:
/// `"Which API should the export use?" (options: 1. REST v2, 2. GraphQL)`.
pub fn one_line(question: &str, options: &[String]) -> String {
    let mut out = format!("\"{}\"", flatten(question, ONE_LINE_CHARS));
    if !options.is_empty() {
        let numbered: Vec<String> = options
            .iter()
            .enumerate()
            .map(|(i, o)| format!("{}. {}", i + 1, flatten(o, ONE_LINE_CHARS)))
            .collect();
        out.push_str(&format!(" (options: {})", numbered.join(", ")));
    }
    out
}

/// `text` with every run of whitespace and control characters as one space, cut at
/// `max` characters (an ellipsis marks the cut).
pub fn flatten(text: &str, max: usize) -> String {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect();
    let joined = words.join(" ");
    if joined.chars().count() <= max {
        return joined;
    }
    let mut cut: String = joined.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The valid `sortie:question` blocks in `text`, in document order (malformed ones are
/// skipped: a mangled question is not a question).
pub fn parse_question_blocks(text: &str) -> Vec<QuestionBlock> {
    fences_named(text, |info| {
        (sortie_marker(info) == Some("sortie:question")).then_some(())
    })
    .into_iter()
    .filter(|fence| fence.closed)
    .filter_map(|fence| serde_yaml::from_str(&fence.body).ok())
    .collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerBlock {
    question_id: String,
    #[serde(default)]
    answer: Option<String>,
    #[serde(default)]
    option: Option<usize>,
}

/// The answer `comment` gives to `question`: `None` when the comment is no answer at
/// all, `Err` when it tries to answer and cannot count (with why, for the log).
pub fn parse_answer(
    comment: &str,
    question: &QuestionBlock,
) -> Option<Result<Answer, NotAnAnswer>> {
    let first = comment.trim_start();
    if let Some(rest) = first.strip_prefix("/answer") {
        if rest.is_empty() || rest.starts_with(char::is_whitespace) {
            return Some(answer_text(rest.trim(), question));
        }
    }
    let blocks = fences_named(comment, |info| {
        (sortie_marker(info) == Some("sortie:answer")).then_some(())
    });
    let fence = blocks.into_iter().next()?;
    let block: AnswerBlock = match serde_yaml::from_str(&fence.body) {
        Ok(block) => block,
        Err(err) => return Some(Err(NotAnAnswer::Unreadable(format!("answer block: {err}")))),
    };
    if block.question_id != question.question_id {
        return Some(Err(NotAnAnswer::OtherQuestion(block.question_id)));
    }
    Some(match (block.option, block.answer) {
        (Some(n), _) => pick(n, question),
        (None, Some(text)) => answer_text(text.trim(), question),
        (None, None) => Err(NotAnAnswer::Unreadable(
            "answer block has neither `answer` nor `option`".to_string(),
        )),
    })
}

fn answer_text(text: &str, question: &QuestionBlock) -> Result<Answer, NotAnAnswer> {
    if text.is_empty() {
        return Err(NotAnAnswer::Unreadable("the answer is empty".to_string()));
    }
    match text.parse::<usize>() {
        Ok(n) if !question.options.is_empty() => pick(n, question),
        _ => Ok(Answer {
            text: text.to_string(),
        }),
    }
}

fn pick(n: usize, question: &QuestionBlock) -> Result<Answer, NotAnAnswer> {
    match n.checked_sub(1).and_then(|i| question.options.get(i)) {
        Some(option) => Ok(Answer {
            text: option.clone(),
        }),
        None => Err(NotAnAnswer::NoSuchOption(n, question.options.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question() -> QuestionBlock {
        QuestionBlock {
            question_id: "architect-1-q1".to_string(),
            role: "architect".to_string(),
            stage_attempt: 1,
            idempotency_key: "k".repeat(64),
            question: "Which API should the export use?".to_string(),
            options: vec!["REST v2".to_string(), "GraphQL".to_string()],
            default: Some("REST v2".to_string()),
            deadline: None,
            context: "Both exist.\nNeither is documented.".to_string(),
        }
    }

    #[test]
    fn a_rendered_question_reads_back_and_says_how_to_answer() {
        let q = question();
        let comment = render_question_comment(&q);
        assert!(
            comment.contains("`/answer 2` for the second option"),
            "{comment}"
        );
        assert!(comment.contains("2. GraphQL"), "{comment}");
        assert_eq!(parse_question_blocks(&comment), vec![q]);
        // Outcome-block readers leave it alone: it is not a success or a failure.
        assert!(crate::block::parse_blocks(&comment).is_empty());
    }

    #[test]
    fn backticks_in_the_question_do_not_close_its_fence() {
        let q = QuestionBlock {
            context: "It fails here:\n```\nerror\n```\n".to_string(),
            ..question()
        };
        assert_eq!(parse_question_blocks(&render_question_comment(&q)), vec![q]);
    }

    #[test]
    fn a_quoted_question_is_not_a_question() {
        let quoted: String = render_question_comment(&question())
            .lines()
            .map(|l| format!("> {l}\n"))
            .collect();
        assert!(parse_question_blocks(&quoted).is_empty());
    }

    #[test]
    fn answers_by_text_by_option_number_and_by_block() {
        let q = question();
        let text = |c: &str| parse_answer(c, &q).map(|r| r.map(|a| a.text));
        assert_eq!(text("/answer 2"), Some(Ok("GraphQL".to_string())));
        assert_eq!(
            text("/answer use REST, we own it\nmore words"),
            Some(Ok("use REST, we own it\nmore words".to_string()))
        );
        assert_eq!(
            text("/answer 3"),
            Some(Err(NotAnAnswer::NoSuchOption(3, 2)))
        );
        assert_eq!(
            text("```yaml sortie:answer\nquestion_id: architect-1-q1\noption: 1\n```\n"),
            Some(Ok("REST v2".to_string()))
        );
        assert_eq!(
            text("```yaml sortie:answer\nquestion_id: backend-2-q1\nanswer: x\n```\n"),
            Some(Err(NotAnAnswer::OtherQuestion("backend-2-q1".to_string())))
        );
        assert!(matches!(
            text("/answer   "),
            Some(Err(NotAnAnswer::Unreadable(_)))
        ));
        assert_eq!(text("thanks, /answer 2 later"), None);
        assert_eq!(text("/answered already"), None);
    }

    // Jira stores comments as wiki markup (Data Center) or ADF (Cloud); a question and a
    // person's answer come back through both.
    #[test]
    fn a_question_and_an_answer_survive_jiras_two_formats() {
        use crate::block::jira::{adf, wiki};
        let q = QuestionBlock {
            context: "It fails: {code}x{code} and `ticks`".to_string(),
            ..question()
        };
        let comment = render_question_comment(&q);
        let via_wiki = wiki::to_markdown(&wiki::from_markdown(&comment));
        assert_eq!(
            parse_question_blocks(&via_wiki),
            vec![q.clone()],
            "{via_wiki}"
        );
        let via_adf = adf::to_markdown(&adf::from_markdown(&comment));
        assert_eq!(
            parse_question_blocks(&via_adf),
            vec![q.clone()],
            "{via_adf}"
        );
        for answer in ["/answer 2", "/answer use GraphQL, not REST"] {
            for back in [
                wiki::to_markdown(&wiki::from_markdown(answer)),
                adf::to_markdown(&adf::from_markdown(answer)),
            ] {
                assert!(
                    parse_answer(&back, &q).is_some_and(|a| a.is_ok()),
                    "{back:?}"
                );
            }
        }
        let block = "```yaml sortie:answer\nquestion_id: architect-1-q1\noption: 2\n```\n";
        for back in [
            wiki::to_markdown(&wiki::from_markdown(block)),
            adf::to_markdown(&adf::from_markdown(block)),
        ] {
            assert_eq!(
                parse_answer(&back, &q).map(|a| a.map(|a| a.text)),
                Some(Ok("GraphQL".to_string())),
                "{back:?}"
            );
        }
    }

    #[test]
    fn a_number_is_text_when_no_options_are_offered() {
        let q = QuestionBlock {
            options: Vec::new(),
            ..question()
        };
        assert_eq!(
            parse_answer("/answer 42", &q).unwrap().unwrap().text,
            "42".to_string()
        );
    }

    /// Issue #52, 11: on a terminal line the question cannot break the line or send
    /// an escape sequence, and a long one is cut.
    #[test]
    fn one_line_flattens_control_characters_and_cuts_a_long_question() {
        let q = question();
        assert_eq!(
            one_line(&q.question, &q.options),
            r#""Which API should the export use?" (options: 1. REST v2, 2. GraphQL)"#
        );
        assert_eq!(
            one_line("Red\x1b[31m or\n\tblue?\r", &[]),
            r#""Red [31m or blue?""#
        );
        let long = one_line(&"a".repeat(500), &[]);
        assert_eq!(long.chars().count(), ONE_LINE_CHARS + 2, "{long}");
        assert!(long.ends_with("…\""), "{long}");
    }
}
