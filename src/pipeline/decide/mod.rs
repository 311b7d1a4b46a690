//! The decisions of a tick, with no I/O: which tickets are eligible and in what order
//! (`eligibility`, with the stage filters in `filter`), the in-flight ceilings (`caps`), where a ticket is against where its
//! claim or retry expects it (`placement`) and whether a hold still stands (`release`), the plan of a tick (`plan`), which of a stage's routes a run takes (`route`), what
//! an agent's outcome becomes (`outcome`), what its question becomes and whether a ticket with an open question waits (`question`), and what a watched pull request calls for (`reaction`), and the day limit's hold on dispatch (`budget`). Each is tested beside its code.

pub mod budget;
pub mod caps;
pub mod eligibility;
pub mod filter;
pub mod outcome;
pub mod placement;
pub mod plan;
pub mod question;
pub mod reaction;
pub mod release;
pub mod route;
