//! The embedded local board: one folder per ticket in plain files (stub until it lands).
