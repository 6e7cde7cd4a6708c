//! SeaORM entities for the tables the server reads and writes today.

pub mod experiment;
pub mod gpu;
pub mod job;
pub mod job_event;
pub mod node;
pub mod run;
pub mod template;
pub mod upload;
