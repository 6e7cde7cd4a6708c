//! The `trainyard` command: `serve` (the default), `migrate` and `version`,
//! and the hidden `job-shim` the server starts for each job.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use trainyard::config::{self, Overrides};
use trainyard::{Server, ServerError};
use trainyard_store::Store;

#[derive(Parser)]
#[command(
    name = "trainyard",
    version,
    about = "Train models on shared GPUs and track them."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    settings: SettingArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run the web server (the default when no command is given).
    #[command(after_help = config::help_table())]
    Serve,
    /// Apply pending database migrations, then exit.
    Migrate {
        /// List applied and pending migrations instead of applying them.
        #[arg(long)]
        status: bool,
    },
    /// Print the version and the database schema this build expects.
    Version,
    /// Supervise one job (started by the server, not by hand).
    #[command(hide = true)]
    JobShim {
        /// The job attempt's folder, holding launch.json.
        dir: PathBuf,
    },
}

#[derive(Args)]
struct SettingArgs {
    /// Read settings from this TOML file (default: ./trainyard.toml if present) [env: TRAINYARD_CONFIG]
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Address to listen on [env: TRAINYARD_LISTEN] [default: 127.0.0.1:3000]
    #[arg(long, global = true, value_name = "ADDR")]
    listen: Option<String>,
    /// Data folder [env: TRAINYARD_DATA_DIR] [default: ./data]
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Database URL [env: TRAINYARD_DATABASE_URL] [default: sqlite://<data_dir>/trainyard.db]
    #[arg(long, global = true, value_name = "URL")]
    database_url: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let overrides = Overrides {
        listen: cli.settings.listen,
        data_dir: cli.settings.data_dir,
        database_url: cli.settings.database_url,
    };
    let command = cli.command.unwrap_or(Command::Serve);
    if let Command::JobShim { dir } = &command {
        return trainyard_jobs::shim::main(dir);
    }
    if let Command::Version = command {
        println!("trainyard {}", env!("CARGO_PKG_VERSION"));
        println!("schema: {}", Store::known_migrations().join(", "));
        return ExitCode::SUCCESS;
    }
    let config = match config::load(cli.settings.config.as_deref(), &overrides) {
        Ok(config) => config,
        Err(err) => return fail(&ServerError::Config(err)),
    };
    init_tracing(&config.log);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return fail(&ServerError::Io(err)),
    };
    let result = runtime.block_on(async {
        match command {
            Command::Serve => serve(config).await,
            Command::Migrate { status } => migrate(config, status).await,
            Command::Version | Command::JobShim { .. } => Ok(()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(&err),
    }
}

async fn serve(config: trainyard::Config) -> Result<(), ServerError> {
    tracing::info!(
        database = %config.database_url_redacted(),
        data_dir = %config.data_dir.display(),
        "starting trainyard {}",
        env!("CARGO_PKG_VERSION")
    );
    let server = Server::bind(&config).await?;
    let addr = server.local_addr()?;
    tracing::info!("listening on http://{addr}");
    println!("Trainyard is running at http://{addr}");
    server.run().await
}

async fn migrate(config: trainyard::Config, status: bool) -> Result<(), ServerError> {
    config.prepare_folders()?;
    let store = Store::connect(&config.database_url, 1).await?;
    if status {
        let pending = store.pending_migrations().await?;
        for name in Store::known_migrations() {
            let state = if pending.contains(&name) {
                "pending"
            } else {
                "applied"
            };
            println!("{state:8} {name}");
        }
    } else {
        let applied = store.migrate().await?;
        println!(
            "applied {} migration(s) to {}",
            applied.len(),
            config.database_url_redacted()
        );
        for name in applied {
            println!("  {name}");
        }
    }
    store.close().await?;
    Ok(())
}

fn init_tracing(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

fn fail(err: &ServerError) -> ExitCode {
    eprintln!("trainyard: error: {err}");
    ExitCode::FAILURE
}
