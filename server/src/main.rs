//! The `trainyard` command: `serve` (the default), `migrate` and `version`;
//! the job commands (`submit`, `jobs`, `logs`, `cancel`, `upload-dataset`)
//! that talk to a server; `job-files`, which fetches what a job starts from
//! with its token; and the hidden `job-shim` the server starts for
//! each job.

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
    /// After the secrets_key is lost for good: drop the sealed secrets it
    /// cannot open. Webhooks with a secret are turned off until an admin
    /// gives them a new one; sessions end and people sign in again.
    ForgetSecrets,
    /// Print the version and the database schema this build expects.
    Version,
    /// Submit a job spec (YAML, or JSON by its extension) to a server.
    Submit {
        /// The spec file.
        spec: PathBuf,
        /// A project archive (zip, tar or tar.gz) to upload with it.
        #[arg(long, value_name = "ARCHIVE")]
        file: Option<PathBuf>,
        /// A dataset the job reads (repeat for more).
        #[arg(long = "dataset", value_name = "NAME")]
        datasets: Vec<String>,
        /// A hyperparameter for this job, over the spec's (repeat for more):
        /// `--set lr=0.01`. Each is added to the job's name (and its run's),
        /// so that a sweep's jobs tell themselves apart.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// The job's name, instead of the spec's (and of what --set adds).
        #[arg(long)]
        name: Option<String>,
        /// Start from the checkpoints that job JOB of yours left in
        /// TRAINYARD_CHECKPOINT_DIR (it hit its max runtime, was cancelled
        /// or failed), kept for checkpoint_keep_hours after it ended.
        #[arg(long, value_name = "JOB")]
        resume_from: Option<i64>,
        /// Stay, print the log as it is written, and exit as the job does:
        /// 0, its exit code if it failed with one, else 1.
        #[arg(long, short)]
        follow: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// List jobs, newest first: yours, or with --all every one you may
    /// see (your teams'; an admin's: all), with their owners.
    Jobs {
        /// Only these states, e.g. QUEUED,RUNNING.
        #[arg(long)]
        state: Option<String>,
        /// Every job you may see, not only yours.
        #[arg(long)]
        all: bool,
        #[arg(long, default_value_t = 50)]
        limit: u64,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Print a job's log.
    Logs {
        id: i64,
        /// Follow it until the job ends, and exit as it does (as submit
        /// --follow).
        #[arg(long, short, conflicts_with = "attempt")]
        follow: bool,
        /// An earlier attempt's log (1 is the first), not the latest's.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        attempt: Option<u32>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Cancel a job.
    Cancel {
        id: i64,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Delete ended jobs for good: their timelines, logs, files and kept
    /// checkpoints (their runs stay in their experiments).
    Delete {
        #[arg(required = true, value_name = "ID")]
        ids: Vec<i64>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Upload a dataset (an archive) under a name jobs can use.
    UploadDataset {
        name: String,
        archive: PathBuf,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Fetch what a job starts from into a folder, with the job's own token:
    /// its files, and each dataset it names under data/<name> (what a
    /// Kubernetes pod's init container runs).
    JobFiles {
        /// An empty or new folder.
        #[arg(long, value_name = "DIR")]
        into: PathBuf,
        /// The job
        #[arg(long, env = "TRAINYARD_JOB_ID")]
        job: i64,
        /// The Trainyard server, as the job reaches it
        #[arg(long, env = "MLFLOW_TRACKING_URI")]
        server: String,
        /// The job's token
        #[arg(long, env = "MLFLOW_TRACKING_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
    /// Run a node's GPU agent: sample this node's GPUs and send them to the
    /// server with the node's token (made by an admin: POST
    /// /api/trainyard/v1/nodes/{node}/tokens). Readings wait on disk while
    /// the server is away.
    Agent {
        /// The Trainyard server, as this node reaches it
        #[arg(long, env = "TRAINYARD_SERVER")]
        server: String,
        /// A file holding the node's token (a mounted Secret), or on
        /// Kubernetes the agent's ServiceAccount token (audience
        /// trainyard-agent, projected by the chart); read for every request
        #[arg(long, env = "TRAINYARD_AGENT_TOKEN_FILE", value_name = "PATH")]
        token_file: PathBuf,
        /// This node's name (Kubernetes' node name; default: the hostname)
        #[arg(long, env = "TRAINYARD_NODE_NAME")]
        node: Option<String>,
        /// Where readings wait while the server is away
        #[arg(
            long,
            env = "TRAINYARD_AGENT_SPOOL",
            default_value = "/var/lib/trainyard/agent",
            value_name = "DIR"
        )]
        spool: PathBuf,
        /// Seconds between samples (1-3600)
        #[arg(long, env = "TRAINYARD_GPU_SAMPLE_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
        sample_secs: u64,
        /// GPUs to simulate where there is no NVIDIA driver (0-64)
        #[arg(long, env = "TRAINYARD_SIMULATED_GPUS", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=64))]
        simulated_gpus: u32,
        /// Hours of readings kept while the server is away, at the sample
        /// period (1-48: the server keeps raw samples 48 hours)
        #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u64).range(1..=48))]
        buffer_hours: u64,
        /// The kubelet's pod-resources socket, read for which pod holds
        /// which GPU (on Kubernetes the device plugin picks them; usually
        /// /var/lib/kubelet/pod-resources/kubelet.sock). Unset: the
        /// server's own picks stand
        #[arg(long, env = "TRAINYARD_POD_RESOURCES_SOCKET", value_name = "PATH")]
        pod_resources_socket: Option<PathBuf>,
        /// The extended resource whose devices the kubelet lists as GPUs
        /// (the server's kube_gpu_resource)
        #[arg(long, env = "TRAINYARD_KUBE_GPU_RESOURCE", default_value = trainyard_kube::pod_resources::GPU_RESOURCE)]
        gpu_resource: String,
    },
    /// Supervise one job (started by the server, not by hand).
    #[command(hide = true)]
    JobShim {
        /// The job attempt's folder, holding launch.json.
        dir: PathBuf,
    },
}

/// Which server the job commands talk to.
#[derive(Args)]
struct RemoteArgs {
    /// The Trainyard server
    #[arg(
        long,
        env = "TRAINYARD_SERVER",
        default_value = "http://127.0.0.1:3000"
    )]
    server: String,
    /// An API token (sent as a Bearer token)
    #[arg(long, env = "TRAINYARD_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

impl RemoteArgs {
    fn remote(&self) -> trainyard::cli::Remote {
        trainyard::cli::Remote {
            server: self.server.clone(),
            token: self.token.clone().filter(|t| !t.is_empty()),
        }
    }
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
        trainyard_jobs::shim::close_inherited_descriptors();
        return trainyard_jobs::shim::main(dir);
    }
    if let Command::Agent { .. } = &command {
        return run_agent(command);
    }
    if let Some(code) = run_client(&command) {
        return code;
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
            Command::ForgetSecrets => forget_secrets(config).await,
            _ => Ok(()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(&err),
    }
}

/// The job commands: they talk to a server and need no settings of their own.
fn run_client(command: &Command) -> Option<ExitCode> {
    use trainyard::cli;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return Some(fail(&ServerError::Io(err))),
    };
    let result = runtime.block_on(async {
        Some(match command {
            Command::Submit {
                spec,
                file,
                datasets,
                set,
                name,
                resume_from,
                follow,
                remote,
            } => {
                let changes = cli::SpecChanges {
                    datasets,
                    set,
                    name: name.as_deref(),
                    resume_from: *resume_from,
                };
                cli::submit(&remote.remote(), spec, file.as_deref(), &changes, *follow).await
            }
            Command::Jobs {
                state,
                all,
                limit,
                remote,
            } => cli::jobs(&remote.remote(), state.as_deref(), *all, *limit).await,
            Command::Logs {
                id,
                follow,
                attempt,
                remote,
            } => cli::logs(&remote.remote(), *id, *follow, *attempt).await,
            Command::Cancel { id, remote } => cli::cancel(&remote.remote(), *id).await,
            Command::Delete { ids, remote } => cli::delete(&remote.remote(), ids).await,
            Command::UploadDataset {
                name,
                archive,
                remote,
            } => cli::upload_dataset(&remote.remote(), name, archive).await,
            Command::JobFiles {
                into,
                job,
                server,
                token,
            } => {
                let remote = cli::Remote {
                    server: server.clone(),
                    token: token.clone().filter(|t| !t.is_empty()),
                };
                cli::job_files(&remote, *job, into).await
            }
            _ => return None,
        })
    })?;
    Some(match result {
        Ok(code) => code,
        Err(cli::CliError(message)) => {
            eprintln!("trainyard: error: {message}");
            ExitCode::FAILURE
        }
    })
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

async fn forget_secrets(config: trainyard::Config) -> Result<(), ServerError> {
    // While rotating, what the previous key opens is kept.
    let store = trainyard::keyed_store(&config, 1).await?;
    let (webhooks, sessions) = store.forget_unopened_secrets().await?;
    println!(
        "dropped the secrets of {webhooks} webhook(s), now off until given a new secret, and the refresh tokens of {sessions} session(s), now ended"
    );
    Ok(())
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

/// `trainyard agent`: runs until killed.
fn run_agent(command: Command) -> ExitCode {
    let Command::Agent {
        server,
        token_file,
        node,
        spool,
        sample_secs,
        simulated_gpus,
        buffer_hours,
        pod_resources_socket,
        gpu_resource,
    } = command
    else {
        return ExitCode::FAILURE;
    };
    init_tracing(&std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned()));
    if let Err(e) = trainyard::agent::read_token(&token_file) {
        eprintln!("trainyard: error: {e}");
        return ExitCode::FAILURE;
    }
    // As the server refuses an empty kube_gpu_resource: no device would be
    // a GPU, and every pod's GPUs would go unsaid.
    let gpu_resource = gpu_resource.trim().to_owned();
    if gpu_resource.is_empty() {
        eprintln!(
            "trainyard: error: --gpu-resource (TRAINYARD_KUBE_GPU_RESOURCE) must not be empty; give the extended resource that counts GPUs, such as nvidia.com/gpu"
        );
        return ExitCode::FAILURE;
    }
    let readings = buffer_hours * 3600 / sample_secs;
    let options = trainyard::agent::AgentOptions {
        server,
        token_file,
        node: node.unwrap_or_else(trainyard_jobs::machine::node_name),
        spool,
        sample_every: std::time::Duration::from_secs(sample_secs),
        simulated_gpus,
        max_segments: (readings as usize).div_ceil(trainyard::agent::SEGMENT_READINGS),
        pod_resources_socket,
        gpu_resource,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return fail(&ServerError::Io(err)),
    };
    match runtime.block_on(trainyard::agent::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(trainyard::cli::CliError(message)) => {
            eprintln!("trainyard: error: {message}");
            ExitCode::FAILURE
        }
    }
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
