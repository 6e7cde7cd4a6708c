//! The server's integration tests: the real server on a port of its own,
//! against a database of its own, driven over HTTP (`common`).
//!
//! One test program, not one per file: each program links the whole server,
//! and on 2 cores eleven of them cost minutes of every build.

mod common;

mod agent;
mod auth;
mod cli;
mod durability;
mod explorer;
mod fair_share;
mod http;
mod jobs;
mod kubernetes;
mod security;
mod telemetry;
