//! SeaORM entities for the tables the server reads and writes today.

pub mod api_token;
pub mod experiment;
pub mod gpu;
pub mod job;
pub mod job_event;
pub mod login_attempt;
pub mod membership;
pub mod node;
pub mod run;
pub mod session;
pub mod team;
pub mod template;
pub mod upload;
pub mod user;
