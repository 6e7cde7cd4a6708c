//! `cargo leptos …`: cargo-leptos' own command line, unchanged.

use clap::Parser;

#[tokio::main]
async fn main() -> color_eyre::Result<()> {
    color_eyre::install()?;
    // Run as `cargo leptos`, cargo passes "leptos" first; clap expects the
    // subcommand there.
    let mut args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "leptos") {
        args.remove(1);
    }
    let cli = cargo_leptos::config::Cli::parse_from(&args);
    let verbose = cli.opts().map(|o| o.verbose).unwrap_or(0);
    cargo_leptos::logger::setup(verbose, &cli.log);
    cargo_leptos::run(cli).await
}
