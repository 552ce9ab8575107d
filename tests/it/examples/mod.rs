//! The examples users copy, run as they are, and the README's program.

mod forward;
mod frozen;
mod health;
mod readme_guard;
mod worker;
