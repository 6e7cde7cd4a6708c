//! Configuration: built-in defaults < `trainyard.toml` < `TRAINYARD_*`
//! environment variables (and `TRAINYARD_*_FILE` secrets) < command-line flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use serde::{Deserialize, Serialize};
use trainyard_store::seal::SealingKey;
use trainyard_store::{Engine, redact};

/// One setting as `--help` and the README document it.
pub struct SettingDoc {
    pub key: &'static str,
    pub env: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
}

/// Every setting, in the order the documentation lists them.
pub const SETTINGS: &[SettingDoc] = &[
    SettingDoc {
        key: "listen",
        env: "TRAINYARD_LISTEN",
        default: "127.0.0.1:3000",
        meaning: "address and port the web server binds",
    },
    SettingDoc {
        key: "data_dir",
        env: "TRAINYARD_DATA_DIR",
        default: "./data",
        meaning: "folder for the embedded database, artifacts and job files (created if missing)",
    },
    SettingDoc {
        key: "database_url",
        env: "TRAINYARD_DATABASE_URL",
        default: "sqlite://<data_dir>/trainyard.db",
        meaning: "sqlite://PATH or postgres://USER:PASSWORD@HOST:PORT/DB",
    },
    SettingDoc {
        key: "database_max_connections",
        env: "TRAINYARD_DATABASE_MAX_CONNECTIONS",
        default: "8",
        meaning: "size of the database connection pool",
    },
    SettingDoc {
        key: "artifact_max_bytes",
        env: "TRAINYARD_ARTIFACT_MAX_BYTES",
        default: "2147483648",
        meaning: "largest artifact file one upload may send (bytes); larger ones get 413",
    },
    SettingDoc {
        key: "upload_max_bytes",
        env: "TRAINYARD_UPLOAD_MAX_BYTES",
        default: "2147483648",
        meaning: "largest project archive or dataset one upload may send (bytes; 413 beyond); it may unpack to 4 times this and 100,000 files",
    },
    SettingDoc {
        key: "upload_quota_bytes",
        env: "TRAINYARD_UPLOAD_QUOTA_BYTES",
        default: "53687091200",
        meaning: "most bytes one person's uploads (projects and datasets, unpacked) may hold in all; past it an upload gets 507 saying what is used; 0: no quota",
    },
    SettingDoc {
        key: "upload_quota_entries",
        env: "TRAINYARD_UPLOAD_QUOTA_ENTRIES",
        default: "1000000",
        meaning: "most files and folders one person's uploads (unpacked, each upload's own folder included) may hold in all, whatever their bytes; past it an upload gets 507 saying what is used; 0: no quota",
    },
    SettingDoc {
        key: "artifact_quota_bytes",
        env: "TRAINYARD_ARTIFACT_QUOTA_BYTES",
        default: "107374182400",
        meaning: "most bytes the artifacts of one person's runs may hold in all; past it an artifact upload gets 507 saying what is used; 0: no quota",
    },
    SettingDoc {
        key: "job_disk_quota_bytes",
        env: "TRAINYARD_JOB_DISK_QUOTA_BYTES",
        default: "107374182400",
        meaning: "most bytes a running job may hold in its folders (work, home, temporary files, log, checkpoints), measured every 10 s; past it the job is stopped and fails saying how much it held (on Kubernetes: its pod's ephemeral-storage limit); 0: no limit",
    },
    SettingDoc {
        key: "site_dir",
        env: "TRAINYARD_SITE_DIR",
        default: "target/site",
        meaning: "folder of the built browser bundle (wasm, JS, CSS) that cargo-leptos writes",
    },
    SettingDoc {
        key: "log",
        env: "TRAINYARD_LOG",
        default: "info",
        meaning: "log filter, e.g. `info` or `trainyard=debug,tower_http=debug`",
    },
    SettingDoc {
        key: "templates_dir",
        env: "TRAINYARD_TEMPLATES_DIR",
        default: "templates",
        meaning: "folder of the shipped job templates (`<slug>/template.yaml` and the files they use)",
    },
    SettingDoc {
        key: "venv_dir",
        env: "TRAINYARD_VENV_DIR",
        default: "<data_dir>/venvs",
        meaning: "cache of the Python environments made for jobs' requirements.txt, one per distinct file",
    },
    SettingDoc {
        key: "simulated_gpus",
        env: "TRAINYARD_SIMULATED_GPUS",
        default: "0",
        meaning: "GPUs the local executor offers when NVML finds none (jobs see them as CUDA_VISIBLE_DEVICES indices)",
    },
    SettingDoc {
        key: "gpu_sample_secs",
        env: "TRAINYARD_GPU_SAMPLE_SECS",
        default: "10",
        meaning: "seconds between two samples of every GPU (utilization, memory, temperature, power, clocks, ECC and XID errors), 1 to 3600",
    },
    SettingDoc {
        key: "gpu_idle_percent",
        env: "TRAINYARD_GPU_IDLE_PERCENT",
        default: "5",
        meaning: "a GPU held by a job and below this utilization (percent) for `gpu_idle_minutes` is flagged as allocated but idle",
    },
    SettingDoc {
        key: "gpu_idle_minutes",
        env: "TRAINYARD_GPU_IDLE_MINUTES",
        default: "30",
        meaning: "minutes a held GPU must stay below `gpu_idle_percent` to be flagged as idle",
    },
    SettingDoc {
        key: "job_stop_grace_secs",
        env: "TRAINYARD_JOB_STOP_GRACE_SECS",
        default: "10",
        meaning: "seconds a cancelled or timed-out job gets between SIGTERM and SIGKILL",
    },
    SettingDoc {
        key: "fair_share_half_life_hours",
        env: "TRAINYARD_FAIR_SHARE_HALF_LIFE_HOURS",
        default: "168",
        meaning: "how fast past GPU use stops counting against a team and a person in the queue: GPU-hours used this many hours ago count half (1 to 8760)",
    },
    SettingDoc {
        key: "checkpoint_keep_hours",
        env: "TRAINYARD_CHECKPOINT_KEEP_HOURS",
        default: "72",
        meaning: "how long the checkpoints of a job that did not succeed (it hit its max runtime, was cancelled or failed) are kept for its owner's next job to resume from (`resume_from`, or Resume on the job's page); they are listed in the owner's storage until then (0 to 8760; 0: none are kept)",
    },
    SettingDoc {
        key: "checkpoint_keep_bytes",
        env: "TRAINYARD_CHECKPOINT_KEEP_BYTES",
        default: "214748364800",
        meaning: "most bytes one person's kept checkpoints may hold in all (and at most 100 jobs' of them): past it their oldest go first, and a job's that alone is larger is not kept; `0`: no bound but the 100 jobs",
    },
    SettingDoc {
        key: "job_uids",
        env: "TRAINYARD_JOB_UIDS",
        default: "auto",
        meaning: "uids the local executor runs jobs as, one per running job (`FIRST-LAST`, needs root), so a job cannot read the server's data or other jobs' files; `none` runs them as the server's user; `auto` is 60000-60999 when the server runs as root, else none, except with sign-in on, where the start stops with the reason (set none on purpose to share the server's user)",
    },
    SettingDoc {
        key: "job_limits",
        env: "TRAINYARD_JOB_LIMITS",
        default: "auto",
        meaning: "how the local executor holds each job to the CPUs and memory its spec asks for: `cgroup` (a control group per job, v2 or v1; needs root or a delegated cgroup, and the start fails without it), `none` (not enforced), or `auto` (cgroup where it works, else none, said in the log)",
    },
    SettingDoc {
        key: "executor",
        env: "TRAINYARD_EXECUTOR",
        default: "local",
        meaning: "where jobs run: `local` (this machine, under job shims) or `kubernetes` (each attempt a batch/v1 Job on the node Trainyard placed it on; the kube_* settings below)",
    },
    SettingDoc {
        key: "kube_config",
        env: "TRAINYARD_KUBE_CONFIG",
        default: "(none: $KUBECONFIG or ~/.kube/config, else the pod's service account)",
        meaning: "kubeconfig file of the cluster jobs run on (executor = kubernetes)",
    },
    SettingDoc {
        key: "kube_context",
        env: "TRAINYARD_KUBE_CONTEXT",
        default: "(the kubeconfig's current context)",
        meaning: "context of the kubeconfig to use",
    },
    SettingDoc {
        key: "kube_namespace",
        env: "TRAINYARD_KUBE_NAMESPACE",
        default: "(the context's, or the service account's namespace)",
        meaning: "namespace that jobs' Jobs, pods and Secrets are made in",
    },
    SettingDoc {
        key: "kube_node_selector",
        env: "TRAINYARD_KUBE_NODE_SELECTOR",
        default: "(none: every node)",
        meaning: "labels of the nodes jobs may run on and that count as capacity, `key=value,key2=value2` (e.g. nvidia.com/gpu.present=true)",
    },
    SettingDoc {
        key: "kube_tolerations",
        env: "TRAINYARD_KUBE_TOLERATIONS",
        default: "nvidia.com/gpu:NoSchedule",
        meaning: "taints job pods tolerate, `key[=value][:Effect]` comma-separated (GPU nodes are often tainted); empty: none",
    },
    SettingDoc {
        key: "kube_image",
        env: "TRAINYARD_KUBE_IMAGE",
        default: "python:3.12-slim",
        meaning: "container image of jobs whose spec names none (`image:`)",
    },
    SettingDoc {
        key: "kube_trainyard_image",
        env: "TRAINYARD_KUBE_TRAINYARD_IMAGE",
        default: "trainyard:<version>",
        meaning: "Trainyard's own image, run as each pod's init container (`trainyard job-files`) to fetch the job's files and datasets",
    },
    SettingDoc {
        key: "kube_image_pull_secrets",
        env: "TRAINYARD_KUBE_IMAGE_PULL_SECRETS",
        default: "(none)",
        meaning: "Secrets (in kube_namespace) that job pods pull their images with, comma-separated",
    },
    SettingDoc {
        key: "kube_tracking_url",
        env: "TRAINYARD_KUBE_TRACKING_URL",
        default: "<public_url>",
        meaning: "the address pods reach Trainyard at (MLFLOW_TRACKING_URI and their files), e.g. http://trainyard.trainyard.svc",
    },
    SettingDoc {
        key: "kube_gpu_resource",
        env: "TRAINYARD_KUBE_GPU_RESOURCE",
        default: "nvidia.com/gpu",
        meaning: "the extended resource that counts a node's GPUs",
    },
    SettingDoc {
        key: "kube_image_pull_timeout_secs",
        env: "TRAINYARD_KUBE_IMAGE_PULL_TIMEOUT_SECS",
        default: "300",
        meaning: "seconds a job's pod may keep failing to pull its image (ErrImagePull, ImagePullBackOff) before the attempt fails and frees its GPUs; a name that is no image fails at once",
    },
    SettingDoc {
        key: "kube_checkpoint_storage_class",
        env: "TRAINYARD_KUBE_CHECKPOINT_STORAGE_CLASS",
        default: "(none: checkpoints last one attempt)",
        meaning: "the StorageClass of each job's checkpoint volume: a PersistentVolumeClaim of kube_checkpoint_gib made at its first start, mounted at TRAINYARD_CHECKPOINT_DIR (/checkpoints) in every attempt, so that a preempted or retried job resumes; when the job ends for good it is deleted, or, if it did not succeed, kept for checkpoint_keep_hours for a job to resume from (`resume_from`), counted at its full size",
    },
    SettingDoc {
        key: "kube_checkpoint_gib",
        env: "TRAINYARD_KUBE_CHECKPOINT_GIB",
        default: "20",
        meaning: "size of each job's checkpoint volume in GiB (1 to 65536)",
    },
    SettingDoc {
        key: "kube_agent_account",
        env: "TRAINYARD_KUBE_AGENT_ACCOUNT",
        default: "(none: agents use node tokens only)",
        meaning: "the ServiceAccount of the node agents' DaemonSet, `namespace/name`: its token bound to an agent's pod, for the audience trainyard-agent, is that node's credential (checked with a TokenReview; the server's account needs `create` on tokenreviews)",
    },
    SettingDoc {
        key: "public_url",
        env: "TRAINYARD_PUBLIC_URL",
        default: "http://<listen>",
        meaning: "the address people reach Trainyard at (behind a proxy, its https URL); sign-in returns there, and only pages from it may change things",
    },
    SettingDoc {
        key: "oidc_issuer_url",
        env: "TRAINYARD_OIDC_ISSUER_URL",
        default: "(none: single-user mode)",
        meaning: "your institution's OpenID Connect issuer, e.g. https://keycloak.uni.example/realms/main; unset, Trainyard is a single-user tool on loopback",
    },
    SettingDoc {
        key: "oidc_client_id",
        env: "TRAINYARD_OIDC_CLIENT_ID",
        default: "(none)",
        meaning: "the client ID registered at the provider, with redirect URI <public_url>/auth/callback",
    },
    SettingDoc {
        key: "oidc_client_secret",
        env: "TRAINYARD_OIDC_CLIENT_SECRET",
        default: "(none: public client)",
        meaning: "the client's secret; best given as a file with TRAINYARD_OIDC_CLIENT_SECRET_FILE",
    },
    SettingDoc {
        key: "oidc_scopes",
        env: "TRAINYARD_OIDC_SCOPES",
        default: "openid profile email",
        meaning: "scopes asked for at sign-in, space-separated (add the one that releases groups, if your provider needs it)",
    },
    SettingDoc {
        key: "oidc_username_claim",
        env: "TRAINYARD_OIDC_USERNAME_CLAIM",
        default: "preferred_username",
        meaning: "ID token claim that becomes the username",
    },
    SettingDoc {
        key: "oidc_name_claim",
        env: "TRAINYARD_OIDC_NAME_CLAIM",
        default: "name",
        meaning: "ID token claim that becomes the display name",
    },
    SettingDoc {
        key: "oidc_email_claim",
        env: "TRAINYARD_OIDC_EMAIL_CLAIM",
        default: "email",
        meaning: "ID token claim that becomes the email address",
    },
    SettingDoc {
        key: "oidc_groups_claim",
        env: "TRAINYARD_OIDC_GROUPS_CLAIM",
        default: "groups",
        meaning: "ID token claim listing the user's groups; each group is a team",
    },
    SettingDoc {
        key: "oidc_admin_group",
        env: "TRAINYARD_OIDC_ADMIN_GROUP",
        default: "(none)",
        meaning: "members of this group are admins",
    },
    SettingDoc {
        key: "oidc_team_groups",
        env: "TRAINYARD_OIDC_TEAM_GROUPS",
        default: "(none: every group)",
        meaning: "which groups become teams: comma-separated names or patterns (`*` stands for any characters, e.g. `lab-*,course-ml`); an institution's other groups (all-students, mailing lists) are then left out",
    },
    SettingDoc {
        key: "oidc_recheck_secs",
        env: "TRAINYARD_OIDC_RECHECK_SECS",
        default: "900",
        meaning: "how often a signed-in person's groups and admin right are read again from the provider with the refresh token it gave at sign-in (seconds; 0: only at sign-in, and no refresh token is kept); a refused refresh ends that session",
    },
    SettingDoc {
        key: "session_ttl_secs",
        env: "TRAINYARD_SESSION_TTL_SECS",
        default: "43200",
        meaning: "how long a sign-in lasts (seconds)",
    },
    SettingDoc {
        key: "insecure_no_sign_in",
        env: "TRAINYARD_INSECURE_NO_SIGN_IN",
        default: "false",
        meaning: "listen beyond loopback without sign-in, making everyone who can reach the server an admin (never on a shared network)",
    },
    SettingDoc {
        key: "webhook_schemes",
        env: "TRAINYARD_WEBHOOK_SCHEMES",
        default: "https",
        meaning: "the URL schemes registry webhooks may use, comma-separated: https, or http,https to let deliveries go unencrypted (as MLflow's MLFLOW_WEBHOOK_ALLOWED_SCHEMES)",
    },
    SettingDoc {
        key: "webhook_allow_private_hosts",
        env: "TRAINYARD_WEBHOOK_ALLOW_PRIVATE_HOSTS",
        default: "false",
        meaning: "let registry webhooks reach loopback, private and link-local addresses (the cluster's services, the cloud's metadata); by default they go to public addresses only",
    },
    SettingDoc {
        key: "secrets_key",
        env: "TRAINYARD_SECRETS_KEY",
        default: "<data_dir>/secrets.key (made at first start)",
        meaning: "the key that webhooks' secrets and the provider's refresh tokens are sealed with in the database: 64 hexadecimal digits or base64 of 32 bytes (`openssl rand -hex 32`); best given as a file with TRAINYARD_SECRETS_KEY_FILE. Every server of one database needs the same key; keep it apart from database backups. A server started with another key refuses to start; if the key is lost for good, `trainyard forget-secrets` drops what it sealed",
    },
    SettingDoc {
        key: "secrets_key_previous",
        env: "TRAINYARD_SECRETS_KEY_PREVIOUS",
        default: "(none)",
        meaning: "to rotate secrets_key: the key it replaces, which opens what it sealed but seals nothing. At start every secret it sealed is sealed again with secrets_key; then remove this setting",
    },
    SettingDoc {
        key: "shutdown_grace_secs",
        env: "TRAINYARD_SHUTDOWN_GRACE_SECS",
        default: "20",
        meaning: "seconds to let requests in flight finish after SIGTERM or SIGINT",
    },
];

/// The settings as written: what a file, the environment or flags may set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    pub database_max_connections: u32,
    pub artifact_max_bytes: u64,
    pub upload_max_bytes: u64,
    pub upload_quota_bytes: u64,
    pub upload_quota_entries: u64,
    pub artifact_quota_bytes: u64,
    pub job_disk_quota_bytes: u64,
    pub site_dir: PathBuf,
    pub log: String,
    pub templates_dir: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub venv_dir: Option<PathBuf>,
    pub simulated_gpus: u32,
    pub gpu_sample_secs: u64,
    pub gpu_idle_percent: f64,
    pub gpu_idle_minutes: u64,
    pub job_stop_grace_secs: u64,
    pub fair_share_half_life_hours: u64,
    pub checkpoint_keep_hours: u64,
    pub checkpoint_keep_bytes: u64,
    pub job_uids: String,
    pub job_limits: String,
    pub executor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_config: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_context: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_namespace: Option<String>,
    pub kube_node_selector: String,
    pub kube_tolerations: String,
    pub kube_image: String,
    pub kube_trainyard_image: String,
    pub kube_image_pull_secrets: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_tracking_url: Option<String>,
    pub kube_gpu_resource: String,
    pub kube_image_pull_timeout_secs: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_checkpoint_storage_class: Option<String>,
    pub kube_checkpoint_gib: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_agent_account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc_issuer_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc_client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc_client_secret: Option<String>,
    pub oidc_scopes: String,
    pub oidc_username_claim: String,
    pub oidc_name_claim: String,
    pub oidc_email_claim: String,
    pub oidc_groups_claim: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc_admin_group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc_team_groups: Option<String>,
    pub oidc_recheck_secs: u64,
    pub session_ttl_secs: u64,
    pub insecure_no_sign_in: bool,
    pub webhook_schemes: String,
    pub webhook_allow_private_hosts: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_key_previous: Option<String>,
    pub shutdown_grace_secs: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listen: SocketAddr::from(([127, 0, 0, 1], 3000)),
            data_dir: PathBuf::from("./data"),
            database_url: None,
            database_max_connections: 8,
            artifact_max_bytes: 2 << 30,
            upload_max_bytes: 2 << 30,
            upload_quota_bytes: 50 << 30,
            upload_quota_entries: 1_000_000,
            artifact_quota_bytes: 100 << 30,
            job_disk_quota_bytes: 100 << 30,
            site_dir: PathBuf::from("target/site"),
            log: "info".to_owned(),
            templates_dir: PathBuf::from("templates"),
            venv_dir: None,
            simulated_gpus: 0,
            gpu_sample_secs: 10,
            gpu_idle_percent: 5.0,
            gpu_idle_minutes: 30,
            job_stop_grace_secs: 10,
            fair_share_half_life_hours: 168,
            checkpoint_keep_hours: 72,
            checkpoint_keep_bytes: 200 << 30,
            job_uids: "auto".to_owned(),
            job_limits: "auto".to_owned(),
            executor: "local".to_owned(),
            kube_config: None,
            kube_context: None,
            kube_namespace: None,
            kube_node_selector: String::new(),
            kube_tolerations: "nvidia.com/gpu:NoSchedule".to_owned(),
            kube_image: "python:3.12-slim".to_owned(),
            kube_trainyard_image: format!("trainyard:{}", env!("CARGO_PKG_VERSION")),
            kube_image_pull_secrets: String::new(),
            kube_tracking_url: None,
            kube_gpu_resource: "nvidia.com/gpu".to_owned(),
            kube_image_pull_timeout_secs: 300,
            kube_checkpoint_storage_class: None,
            kube_checkpoint_gib: 20,
            kube_agent_account: None,
            public_url: None,
            oidc_issuer_url: None,
            oidc_client_id: None,
            oidc_client_secret: None,
            oidc_scopes: "openid profile email".to_owned(),
            oidc_username_claim: "preferred_username".to_owned(),
            oidc_name_claim: "name".to_owned(),
            oidc_email_claim: "email".to_owned(),
            oidc_groups_claim: "groups".to_owned(),
            oidc_admin_group: None,
            oidc_team_groups: None,
            oidc_recheck_secs: 900,
            session_ttl_secs: 12 * 3600,
            insecure_no_sign_in: false,
            webhook_schemes: "https".to_owned(),
            webhook_allow_private_hosts: false,
            secrets_key: None,
            secrets_key_previous: None,
            shutdown_grace_secs: 20,
        }
    }
}

/// Values given on the command line; each one overrides every other layer.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Overrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
}

pub use trainyard_jobs::telemetry::TelemetrySettings;

/// A configuration that failed, naming the setting and what to do.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Settings after checks, with defaults that depend on other settings filled in.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub database_url: String,
    pub database_max_connections: u32,
    pub artifact_max_bytes: usize,
    pub upload_max_bytes: u64,
    /// Per person; None: no quota.
    pub upload_quota_bytes: Option<u64>,
    pub upload_quota_entries: Option<u64>,
    pub artifact_quota_bytes: Option<u64>,
    /// Per running job; None: no limit.
    pub job_disk_quota_bytes: Option<u64>,
    pub site_dir: PathBuf,
    pub log: String,
    pub templates_dir: PathBuf,
    pub venv_dir: PathBuf,
    pub simulated_gpus: u32,
    pub telemetry: TelemetrySettings,
    pub job_stop_grace_secs: u64,
    pub fair_share_half_life: std::time::Duration,
    /// How long an ended job's checkpoints are kept; zero: none are.
    pub checkpoint_keep: std::time::Duration,
    /// Most bytes one person's kept checkpoints hold; None: no bound.
    pub checkpoint_keep_bytes: Option<u64>,
    pub job_uids: JobUids,
    pub job_limits: JobLimits,
    /// The program started as `PROGRAM job-shim DIR` for each job: this
    /// binary (tests point it at the built one).
    pub job_shim: PathBuf,
    /// Where jobs run: None on this machine, else on Kubernetes.
    pub kubernetes: Option<KubeOptions>,
    pub shutdown_grace: std::time::Duration,
    /// The URL schemes registry webhooks may use (`https`, `http`).
    pub webhook_schemes: Vec<String>,
    /// Registry webhooks may reach addresses that are not public.
    pub webhook_allow_private_hosts: bool,
    pub secrets_key: SecretsKey,
    /// The key `secrets_key` replaces (while rotating): it opens, never seals.
    pub secrets_key_previous: Option<SecretsKey>,
    pub auth: AuthConfig,
}

/// Where the key that seals secrets at rest comes from.
#[derive(Clone)]
pub enum SecretsKey {
    /// Given in the settings (checked).
    Given(std::sync::Arc<str>),
    /// A file in the data folder, made at first start.
    File(PathBuf),
}

impl std::fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretsKey::Given(_) => f.write_str("Given(…)"),
            SecretsKey::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

pub use trainyard_jobs::machine::{JobLimits, JobUids};

/// The Kubernetes executor's settings, checked; what depends on where the
/// server listens (the tracking URL's default) is filled in at start.
#[derive(Debug, Clone)]
pub struct KubeOptions {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub namespace: Option<String>,
    pub node_selector: std::collections::BTreeMap<String, String>,
    pub tolerations: Vec<trainyard_kube::KubeToleration>,
    pub image: String,
    pub trainyard_image: String,
    pub image_pull_secrets: Vec<String>,
    /// None: the public URL.
    pub tracking_url: Option<url::Url>,
    pub gpu_resource: String,
    pub image_pull_timeout: std::time::Duration,
    /// Each job's checkpoint volume: its StorageClass and GiB; None: an
    /// attempt's checkpoints go with it.
    pub checkpoints: Option<(String, u64)>,
    /// The node agents' ServiceAccount, `namespace/name`.
    pub agent_account: Option<String>,
}

/// How people sign in.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// Where people reach the server.
    pub public_url: url::Url,
    /// Whether `public_url` was set; if not, it follows the bound address.
    pub public_url_set: bool,
    /// None: the single-user mode (everyone is the local admin).
    pub oidc: Option<OidcConfig>,
    pub session_ttl: std::time::Duration,
    /// Single-user mode beyond loopback, asked for by name.
    pub insecure_no_sign_in: bool,
}

impl AuthConfig {
    /// Cookies get `Secure` (and the `__Host-` name) behind https.
    pub fn secure_cookies(&self) -> bool {
        self.public_url.scheme() == "https"
    }
}

/// The identity provider and how its claims map to accounts.
#[derive(Debug, Clone)]
pub struct OidcConfig {
    pub issuer_url: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    pub scopes: Vec<String>,
    pub username_claim: String,
    pub name_claim: String,
    pub email_claim: String,
    pub groups_claim: String,
    pub admin_group: Option<String>,
    /// The groups that become teams, as names or `*` patterns; empty: all.
    pub team_groups: Vec<String>,
    /// How often sessions are checked with the provider again; None: never.
    pub recheck: Option<std::time::Duration>,
}

const ENV_PREFIX: &str = "TRAINYARD_";

/// The most patterns `oidc_team_groups` takes, and the longest.
const MAX_TEAM_GROUP_PATTERNS: usize = 64;
const MAX_TEAM_GROUP_PATTERN: usize = 250;

/// `oidc_team_groups` as its patterns (Keycloak's leading `/` dropped, as
/// it is from the groups).
fn team_groups(text: Option<&str>) -> Result<Vec<String>, ConfigError> {
    let Some(text) = text else {
        return Ok(Vec::new());
    };
    let patterns: Vec<String> = text
        .split(',')
        .map(|p| p.trim().trim_start_matches('/').to_owned())
        .filter(|p| !p.is_empty())
        .collect();
    if patterns.is_empty() {
        return Err(ConfigError(format!(
            "oidc_team_groups: `{text}` names no group; give names or patterns separated by commas (`lab-*,course-ml`), or leave it out for every group"
        )));
    }
    if patterns.len() > MAX_TEAM_GROUP_PATTERNS {
        return Err(ConfigError(format!(
            "oidc_team_groups: {} patterns, at most {MAX_TEAM_GROUP_PATTERNS}; a pattern with `*` stands for many groups",
            patterns.len()
        )));
    }
    if let Some(long) = patterns
        .iter()
        .find(|p| p.chars().count() > MAX_TEAM_GROUP_PATTERN)
    {
        return Err(ConfigError(format!(
            "oidc_team_groups: a pattern of {} characters, at most {MAX_TEAM_GROUP_PATTERN}",
            long.chars().count()
        )));
    }
    Ok(patterns)
}
const MAX_SIMULATED_GPUS: u32 = 1024;
const DEFAULT_CONFIG_FILE: &str = "trainyard.toml";

/// Reads the layers from the process environment.
pub fn load(config_file: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    load_from(config_file, overrides, &vars)
}

/// Reads the layers with the environment given, for tests.
pub fn load_from(
    config_file: Option<&Path>,
    overrides: &Overrides,
    vars: &[(String, String)],
) -> Result<Config, ConfigError> {
    let env_config = vars
        .iter()
        .find(|(k, _)| k == "TRAINYARD_CONFIG")
        .map(|(_, v)| PathBuf::from(v));
    let mut figment = Figment::from(Serialized::defaults(Settings::default()));
    match config_file.map(Path::to_path_buf).or(env_config) {
        Some(path) => {
            if !path.is_file() {
                return Err(ConfigError(format!(
                    "config file {} does not exist or is not a file; fix --config / TRAINYARD_CONFIG",
                    path.display()
                )));
            }
            figment = figment.merge(Toml::file_exact(path));
        }
        None if Path::new(DEFAULT_CONFIG_FILE).is_file() => {
            figment = figment.merge(Toml::file_exact(DEFAULT_CONFIG_FILE));
        }
        None => {}
    }
    let env_pairs: Vec<(String, String)> = vars
        .iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .cloned()
        .collect();
    let secrets = secret_files(&env_pairs);
    figment = figment.merge(EnvVars(env_pairs));
    for (key, path) in secrets {
        let value = std::fs::read_to_string(&path).map_err(|e| {
            ConfigError(format!(
                "{}: cannot read secret file {}: {e}",
                env_name_of(&key),
                path.display()
            ))
        })?;
        let value = value.trim_end_matches(['\n', '\r']).to_owned();
        figment = figment.merge(Serialized::default(&key, value));
    }
    figment = figment.merge(Serialized::defaults(overrides));

    // Numbers and switches are read from text where a setting needs one
    // (environment variables are all text); text stays text, so a key or
    // secret of digits alone is not taken for a number.
    let settings: Settings = figment.extract_lossy().map_err(describe_figment_error)?;
    resolve(settings)
}

/// `TRAINYARD_X__Y_FILE=/path` becomes (`x.y`, `/path`).
fn secret_files(vars: &[(String, String)]) -> Vec<(String, PathBuf)> {
    vars.iter()
        .filter_map(|(k, v)| {
            let key = k.strip_prefix(ENV_PREFIX)?.strip_suffix("_FILE")?;
            Some((key.to_lowercase().replace("__", "."), PathBuf::from(v)))
        })
        .collect()
}

fn env_name_of(key: &str) -> String {
    format!("{ENV_PREFIX}{}_FILE", key.replace('.', "__").to_uppercase())
}

/// `TRAINYARD_*` variables as a figment provider: `__` separates nested keys;
/// values are text, read as numbers or switches where a setting is one.
/// Reads a given list, not the process, so tests stay independent of each
/// other.
struct EnvVars(Vec<(String, String)>);

impl figment::Provider for EnvVars {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named("TRAINYARD_* environment variables")
    }

    fn data(
        &self,
    ) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        let mut dict = figment::value::Dict::new();
        for (key, value) in &self.0 {
            let Some(rest) = key.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let key = rest.to_lowercase();
            // TRAINYARD_SERVER and TRAINYARD_TOKEN belong to the job
            // commands, TRAINYARD_NODE_NAME and TRAINYARD_AGENT_* to the
            // node agent.
            if key.is_empty()
                || matches!(key.as_str(), "config" | "server" | "token" | "node_name")
                || key.starts_with("agent_")
                || key.ends_with("_file")
            {
                continue;
            }
            let path: Vec<&str> = key.split("__").collect();
            // As an env file may write it: spaces around, or in quotes.
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            insert_path(&mut dict, &path, value.to_owned().into());
        }
        Ok(figment::Profile::Default.collect(dict))
    }
}

fn insert_path(dict: &mut figment::value::Dict, path: &[&str], value: figment::value::Value) {
    match path {
        [] => {}
        [last] => {
            dict.insert((*last).to_owned(), value);
        }
        [first, rest @ ..] => {
            let entry = dict
                .entry((*first).to_owned())
                .or_insert_with(|| figment::value::Dict::new().into());
            if let figment::value::Value::Dict(_, inner) = entry {
                insert_path(inner, rest, value);
            }
        }
    }
}

fn describe_figment_error(err: figment::Error) -> ConfigError {
    let lines: Vec<String> = err
        .into_iter()
        .map(|e| {
            let source = e
                .metadata
                .as_ref()
                .map(|m| match &m.source {
                    Some(src) => format!(" (from {} {src})", m.name),
                    None => format!(" (from {})", m.name),
                })
                .unwrap_or_default();
            let key = e.path.join(".");
            match &e.kind {
                figment::error::Kind::UnknownField(field, _) => {
                    let known: Vec<&str> = SETTINGS.iter().map(|s| s.key).collect();
                    format!(
                        "unknown setting `{field}`{source}; known settings: {}",
                        known.join(", ")
                    )
                }
                kind => format!("setting `{key}`{source}: {kind}"),
            }
        })
        .collect();
    ConfigError(lines.join("\n"))
}

fn resolve(s: Settings) -> Result<Config, ConfigError> {
    if s.database_max_connections == 0 {
        return Err(ConfigError(
            "database_max_connections: must be at least 1".to_owned(),
        ));
    }
    if s.simulated_gpus > MAX_SIMULATED_GPUS {
        return Err(ConfigError(format!(
            "simulated_gpus: {} is more than the limit of {MAX_SIMULATED_GPUS}",
            s.simulated_gpus
        )));
    }
    if !(1..=8760).contains(&s.fair_share_half_life_hours) {
        return Err(ConfigError(format!(
            "fair_share_half_life_hours: {} is outside 1 to 8760 hours (a year); 168 is a week",
            s.fair_share_half_life_hours
        )));
    }
    if s.checkpoint_keep_hours > 8760 {
        return Err(ConfigError(format!(
            "checkpoint_keep_hours: {} is more than 8760 hours (a year); 72 is three days, 0 keeps none",
            s.checkpoint_keep_hours
        )));
    }
    if !(1..=3600).contains(&s.gpu_sample_secs) {
        return Err(ConfigError(format!(
            "gpu_sample_secs: {} is outside 1 to 3600 seconds",
            s.gpu_sample_secs
        )));
    }
    if !(0.0..=100.0).contains(&s.gpu_idle_percent) {
        return Err(ConfigError(format!(
            "gpu_idle_percent: {} is not a percentage (0 to 100)",
            s.gpu_idle_percent
        )));
    }
    if !(1..=7 * 24 * 60).contains(&s.gpu_idle_minutes) {
        return Err(ConfigError(format!(
            "gpu_idle_minutes: {} is outside 1 minute to a week (10080)",
            s.gpu_idle_minutes
        )));
    }
    tracing_subscriber::EnvFilter::try_new(&s.log)
        .map_err(|e| ConfigError(format!("log: `{}` is not a valid log filter: {e}", s.log)))?;
    let webhook_schemes: Vec<String> = s
        .webhook_schemes
        .split(',')
        .map(|scheme| scheme.trim().to_ascii_lowercase())
        .filter(|scheme| !scheme.is_empty())
        .collect();
    if webhook_schemes.is_empty()
        || webhook_schemes
            .iter()
            .any(|scheme| !matches!(scheme.as_str(), "http" | "https"))
    {
        return Err(ConfigError(format!(
            "webhook_schemes: `{}` is not https, http or both, comma-separated",
            s.webhook_schemes
        )));
    }
    let auth = auth_config(&s)?;
    let kubernetes = match s.executor.trim() {
        "local" => None,
        "kubernetes" => Some(kube_options(&s)?),
        other => {
            return Err(ConfigError(format!(
                "executor: `{other}` is not one of `local` or `kubernetes`"
            )));
        }
    };
    let database_url = match s.database_url {
        Some(url) => {
            let url = url.trim().to_owned();
            Engine::from_url(&url).map_err(|e| ConfigError(e.to_string()))?;
            url
        }
        None => format!("sqlite://{}", s.data_dir.join("trainyard.db").display()),
    };
    let venv_dir = s.venv_dir.unwrap_or_else(|| s.data_dir.join("venvs"));
    let secrets_key = match s.secrets_key.as_deref().map(str::trim) {
        None | Some("") => SecretsKey::File(s.data_dir.join("secrets.key")),
        Some(key) => {
            SealingKey::parse(key).map_err(|e| ConfigError(format!("secrets_key: the key {e}")))?;
            SecretsKey::Given(key.into())
        }
    };
    let secrets_key_previous = match s.secrets_key_previous.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(key) => {
            SealingKey::parse(key)
                .map_err(|e| ConfigError(format!("secrets_key_previous: the key {e}")))?;
            Some(SecretsKey::Given(key.into()))
        }
    };
    let job_uids = match s.job_uids.trim() {
        "auto" => JobUids::Auto,
        "none" => JobUids::ServerUser,
        range => JobUids::Range(
            trainyard_jobs::users::UidRange::parse(range)
                .map_err(|e| ConfigError(format!("job_uids: {e}; or write `auto` or `none`")))?,
        ),
    };
    let job_limits = match s.job_limits.trim() {
        "auto" => JobLimits::Auto,
        "cgroup" => JobLimits::Cgroup,
        "none" => JobLimits::None,
        other => {
            return Err(ConfigError(format!(
                "job_limits: `{other}` is not one of `auto`, `cgroup` or `none`"
            )));
        }
    };
    Ok(Config {
        listen: s.listen,
        data_dir: s.data_dir,
        database_url,
        database_max_connections: s.database_max_connections,
        artifact_max_bytes: usize::try_from(s.artifact_max_bytes).unwrap_or(usize::MAX),
        upload_max_bytes: s.upload_max_bytes,
        upload_quota_bytes: (s.upload_quota_bytes > 0).then_some(s.upload_quota_bytes),
        upload_quota_entries: (s.upload_quota_entries > 0).then_some(s.upload_quota_entries),
        artifact_quota_bytes: (s.artifact_quota_bytes > 0).then_some(s.artifact_quota_bytes),
        job_disk_quota_bytes: (s.job_disk_quota_bytes > 0).then_some(s.job_disk_quota_bytes),
        site_dir: s.site_dir,
        log: s.log,
        templates_dir: s.templates_dir,
        venv_dir,
        simulated_gpus: s.simulated_gpus,
        telemetry: TelemetrySettings {
            sample_every: std::time::Duration::from_secs(s.gpu_sample_secs),
            idle_percent: s.gpu_idle_percent as f32,
            idle_after: std::time::Duration::from_secs(s.gpu_idle_minutes * 60),
        },
        job_stop_grace_secs: s.job_stop_grace_secs,
        fair_share_half_life: std::time::Duration::from_secs(s.fair_share_half_life_hours * 3600),
        checkpoint_keep: std::time::Duration::from_secs(s.checkpoint_keep_hours * 3600),
        checkpoint_keep_bytes: (s.checkpoint_keep_bytes > 0).then_some(s.checkpoint_keep_bytes),
        job_uids,
        job_limits,
        job_shim: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("trainyard")),
        kubernetes,
        shutdown_grace: std::time::Duration::from_secs(s.shutdown_grace_secs),
        webhook_schemes,
        webhook_allow_private_hosts: s.webhook_allow_private_hosts,
        secrets_key,
        secrets_key_previous,
        auth,
    })
}

fn kube_options(s: &Settings) -> Result<KubeOptions, ConfigError> {
    fn non_empty(v: &Option<String>) -> Option<String> {
        v.as_deref()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    }
    let node_selector =
        trainyard_kube::parse_node_selector(&s.kube_node_selector).map_err(|e| {
            ConfigError(format!(
                "kube_node_selector: {e}; write key=value,key2=value2"
            ))
        })?;
    let tolerations = trainyard_kube::parse_tolerations(&s.kube_tolerations).map_err(|e| {
        ConfigError(format!(
            "kube_tolerations: {e}; write key[=value][:Effect], comma-separated"
        ))
    })?;
    let tracking_url = match non_empty(&s.kube_tracking_url) {
        Some(text) => {
            let url = url::Url::parse(text.trim_end_matches('/')).map_err(|e| {
                ConfigError(format!(
                    "kube_tracking_url: `{text}` is not a URL ({e}); use the address pods reach Trainyard at, e.g. http://trainyard.trainyard.svc"
                ))
            })?;
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return Err(ConfigError(format!(
                    "kube_tracking_url: `{text}` must be an http:// or https:// address"
                )));
            }
            Some(url)
        }
        None => None,
    };
    for (key, value) in [
        ("kube_image", &s.kube_image),
        ("kube_trainyard_image", &s.kube_trainyard_image),
        ("kube_gpu_resource", &s.kube_gpu_resource),
    ] {
        if value.trim().is_empty() {
            return Err(ConfigError(format!("{key}: must not be empty")));
        }
    }
    if !(1..=65_536).contains(&s.kube_checkpoint_gib) {
        return Err(ConfigError(format!(
            "kube_checkpoint_gib: {} is out of range; give 1 to 65536 (GiB)",
            s.kube_checkpoint_gib
        )));
    }
    let checkpoints =
        non_empty(&s.kube_checkpoint_storage_class).map(|class| (class, s.kube_checkpoint_gib));
    let agent_account = match non_empty(&s.kube_agent_account) {
        Some(account) => {
            trainyard_kube::agents::parse_account(&account)
                .map_err(|e| ConfigError(format!("kube_agent_account: {e}")))?;
            Some(account.trim().to_owned())
        }
        None => None,
    };
    Ok(KubeOptions {
        kubeconfig: s.kube_config.clone(),
        context: non_empty(&s.kube_context),
        namespace: non_empty(&s.kube_namespace),
        node_selector,
        tolerations,
        image: s.kube_image.trim().to_owned(),
        trainyard_image: s.kube_trainyard_image.trim().to_owned(),
        image_pull_secrets: s
            .kube_image_pull_secrets
            .split(',')
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .collect(),
        tracking_url,
        gpu_resource: s.kube_gpu_resource.trim().to_owned(),
        image_pull_timeout: std::time::Duration::from_secs(s.kube_image_pull_timeout_secs),
        checkpoints,
        agent_account,
    })
}

fn is_loopback_host(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

fn auth_config(s: &Settings) -> Result<AuthConfig, ConfigError> {
    fn non_empty(v: &Option<String>) -> Option<&str> {
        v.as_deref().map(str::trim).filter(|v| !v.is_empty())
    }
    let public_url = match non_empty(&s.public_url) {
        Some(text) => {
            let url = url::Url::parse(text.trim_end_matches('/')).map_err(|e| {
                ConfigError(format!(
                    "public_url: `{text}` is not a URL ({e}); use e.g. https://trainyard.uni.example"
                ))
            })?;
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return Err(ConfigError(format!(
                    "public_url: `{text}` must be an http:// or https:// address"
                )));
            }
            if url.path() != "/" || url.query().is_some() {
                return Err(ConfigError(format!(
                    "public_url: `{text}` must be the server's root, without a path; Trainyard is not served under a sub-path"
                )));
            }
            url
        }
        None if s.listen.ip().is_unspecified() && non_empty(&s.oidc_issuer_url).is_some() => {
            return Err(ConfigError(format!(
                "public_url: required when listening on {} with sign-in, so the provider can send people back; set it to the address people open, e.g. https://trainyard.uni.example",
                s.listen
            )));
        }
        None => url::Url::parse(&format!("http://{}", s.listen))
            .map_err(|e| ConfigError(format!("listen: {e}")))?,
    };
    let oidc = match non_empty(&s.oidc_issuer_url) {
        None => {
            if !s.listen.ip().is_loopback() && !s.insecure_no_sign_in {
                return Err(ConfigError(format!(
                    "listen: {} is reachable from other machines, but sign-in is not configured, so anyone who reaches it would be an admin. \
                     Configure your institution's single sign-on (oidc_issuer_url, oidc_client_id, oidc_client_secret; see the README's Sign-in section), \
                     or listen on 127.0.0.1, or set insecure_no_sign_in = true to accept that risk",
                    s.listen
                )));
            }
            None
        }
        Some(issuer) => {
            let url = url::Url::parse(issuer).map_err(|e| {
                ConfigError(format!("oidc_issuer_url: `{issuer}` is not a URL ({e})"))
            })?;
            if url.scheme() != "https" && !(url.scheme() == "http" && is_loopback_host(&url)) {
                return Err(ConfigError(format!(
                    "oidc_issuer_url: `{issuer}` must use https (plain http is allowed only for a provider on loopback, in tests)"
                )));
            }
            let client_id = non_empty(&s.oidc_client_id).ok_or_else(|| {
                ConfigError(
                    "oidc_client_id: required with oidc_issuer_url; it is the client ID registered at your provider".to_owned(),
                )
            })?;
            let scopes: Vec<String> = s
                .oidc_scopes
                .split_whitespace()
                .map(str::to_owned)
                .collect();
            if !scopes.iter().any(|scope| scope == "openid") {
                return Err(ConfigError(format!(
                    "oidc_scopes: `{}` must include `openid`",
                    s.oidc_scopes
                )));
            }
            Some(OidcConfig {
                issuer_url: issuer.to_owned(),
                client_id: client_id.to_owned(),
                client_secret: non_empty(&s.oidc_client_secret).map(str::to_owned),
                scopes,
                username_claim: s.oidc_username_claim.clone(),
                name_claim: s.oidc_name_claim.clone(),
                email_claim: s.oidc_email_claim.clone(),
                groups_claim: s.oidc_groups_claim.clone(),
                admin_group: non_empty(&s.oidc_admin_group).map(str::to_owned),
                team_groups: team_groups(non_empty(&s.oidc_team_groups))?,
                recheck: match s.oidc_recheck_secs {
                    0 => None,
                    secs @ 1..=86_400 => Some(std::time::Duration::from_secs(secs)),
                    secs => {
                        return Err(ConfigError(format!(
                            "oidc_recheck_secs: {secs} must be at most 86400 (a day), or 0 to read groups only at sign-in"
                        )));
                    }
                },
            })
        }
    };
    if s.session_ttl_secs < 60 || s.session_ttl_secs > 90 * 86_400 {
        return Err(ConfigError(format!(
            "session_ttl_secs: {} must be between 60 (a minute) and 7776000 (90 days)",
            s.session_ttl_secs
        )));
    }
    Ok(AuthConfig {
        public_url_set: non_empty(&s.public_url).is_some(),
        public_url,
        oidc,
        session_ttl: std::time::Duration::from_secs(s.session_ttl_secs),
        insecure_no_sign_in: s.insecure_no_sign_in,
    })
}

impl Config {
    /// Creates the data folder, and checks that an SQLite database can be made
    /// where the URL says, so that a bad path stops the start with its name.
    pub fn prepare_folders(&self) -> Result<(), ConfigError> {
        std::fs::create_dir_all(&self.data_dir).map_err(|e| {
            ConfigError(format!(
                "data_dir: cannot create {}: {e}; choose a folder this user may write",
                self.data_dir.display()
            ))
        })?;
        if let Some(path) = sqlite_path(&self.database_url) {
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
            if let Some(parent) = parent
                && !parent.is_dir()
            {
                return Err(ConfigError(format!(
                    "database_url: the folder {} of the SQLite file does not exist; create it or change database_url",
                    parent.display()
                )));
            }
        }
        Ok(())
    }

    /// The key that seals secrets at rest: the one given, else the data
    /// folder's `secrets.key`, made (owner-only) when there is none yet.
    /// The file is never followed through a link.
    pub fn sealing_key(&self) -> Result<SealingKey, ConfigError> {
        use std::io::{Read as _, Write as _};
        use std::os::unix::fs::OpenOptionsExt as _;
        let path = match &self.secrets_key {
            SecretsKey::Given(key) => {
                return SealingKey::parse(key)
                    .map_err(|e| ConfigError(format!("secrets_key: the key {e}")));
            }
            SecretsKey::File(path) => path,
        };
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            ConfigError(format!(
                "secrets_key: cannot {what} {}: {e}; give the key with TRAINYARD_SECRETS_KEY_FILE, or let the server make the file in data_dir",
                path.display()
            ))
        };
        // Written whole to a file of its own, then linked into place: a
        // crash or a second server starting leaves the key whole or absent.
        let made = if path.exists() || path.is_symlink() {
            Err(std::io::ErrorKind::AlreadyExists.into())
        } else {
            let key = SealingKey::generate();
            let draft = path.with_extension(format!("key.{}.new", std::process::id()));
            let written = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&draft)
                .and_then(|mut file| {
                    file.write_all(format!("{key}\n").as_bytes())?;
                    file.sync_all()
                })
                .and_then(|_| std::fs::hard_link(&draft, path));
            let _ = std::fs::remove_file(&draft);
            written.map(|_| key)
        };
        match made {
            Ok(key) => {
                tracing::info!(path = %path.display(), "made the key that seals secrets at rest; keep it apart from database backups");
                SealingKey::parse(&key).map_err(|e| fail("read", &e))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let mut text = String::new();
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(path)
                    .and_then(|f| f.take(1024).read_to_string(&mut text))
                    .map_err(|e| fail("read", &e))?;
                SealingKey::parse(&text).map_err(|e| fail("use", &format!("the key {e}")))
            }
            Err(e) => Err(fail("make", &e)),
        }
    }

    /// The key that `secrets_key` replaces, while rotating.
    pub fn previous_sealing_key(&self) -> Result<Option<SealingKey>, ConfigError> {
        match &self.secrets_key_previous {
            Some(SecretsKey::Given(key)) => SealingKey::parse(key)
                .map(Some)
                .map_err(|e| ConfigError(format!("secrets_key_previous: the key {e}"))),
            Some(SecretsKey::File(_)) | None => Ok(None),
        }
    }

    /// Where the key comes from, for messages.
    pub fn secrets_key_source(&self) -> String {
        match &self.secrets_key {
            SecretsKey::Given(_) => "given in the settings".to_owned(),
            SecretsKey::File(path) => format!("made in {}", path.display()),
        }
    }

    /// The database URL with its password hidden, for logs.
    pub fn database_url_redacted(&self) -> String {
        redact(&self.database_url)
    }
}

/// The file of an `sqlite://` URL, if it names one (not `:memory:`).
pub(crate) fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or("");
    if path.is_empty() || path.starts_with(":memory:") {
        return None;
    }
    Some(PathBuf::from(path))
}

/// The settings table for `serve --help`.
pub fn help_table() -> String {
    let mut out = String::from(
        "Settings (defaults < trainyard.toml or --config < TRAINYARD_* env < flags;\n\
         any setting may also be read from a file named by TRAINYARD_<NAME>_FILE):\n",
    );
    for s in SETTINGS {
        out.push_str(&format!(
            "  {:<26} {:<36} default {}\n  {:<26} {}\n",
            s.key, s.env, s.default, "", s.meaning
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn load_env(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        load_from(None, &Overrides::default(), &env(pairs))
    }

    #[test]
    fn defaults_give_sqlite_in_the_data_folder() {
        let config = load_env(&[]).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:3000");
        assert_eq!(config.data_dir, PathBuf::from("./data"));
        assert_eq!(config.database_url, "sqlite://./data/trainyard.db");
    }

    #[test]
    fn layers_apply_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:4000\"\ndata_dir = \"/srv/ty\"\nlog = \"debug\"\n",
        )
        .unwrap();
        let vars = env(&[
            ("TRAINYARD_LISTEN", "127.0.0.1:5000"),
            ("TRAINYARD_DATA_DIR", "/var/ty"),
        ]);
        let overrides = Overrides {
            data_dir: Some(PathBuf::from("/flag")),
            ..Overrides::default()
        };
        let config = load_from(Some(&file), &overrides, &vars).unwrap();
        assert_eq!(config.listen.port(), 5000, "env beats file");
        assert_eq!(config.data_dir, PathBuf::from("/flag"), "flag beats env");
        assert_eq!(config.log, "debug", "file beats default");
        assert_eq!(config.database_url, "sqlite:///flag/trainyard.db");
    }

    #[test]
    fn the_secrets_key_is_made_once_in_the_data_folder_or_given() {
        use std::os::unix::fs::PermissionsExt as _;
        use trainyard_store::seal::Purpose;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_str().unwrap();
        let config = load_env(&[("TRAINYARD_DATA_DIR", data)]).unwrap();
        let made = config.sealing_key().unwrap();
        let file = dir.path().join("secrets.key");
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.trim_end().len(), 64);
        let sealed = made.seal(Purpose::WebhookSecret, "w1", "k");
        let again = config.sealing_key().unwrap();
        assert_eq!(
            again.open(Purpose::WebhookSecret, "w1", &sealed).unwrap(),
            "k",
            "the next start reads the same key"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), text);

        // Given, it is used and no file is made; a bad one stops the start.
        let given = tempfile::tempdir().unwrap();
        let config = load_env(&[
            ("TRAINYARD_DATA_DIR", given.path().to_str().unwrap()),
            ("TRAINYARD_SECRETS_KEY", text.trim_end()),
        ])
        .unwrap();
        let opened = config.sealing_key().unwrap();
        assert_eq!(
            opened.open(Purpose::WebhookSecret, "w1", &sealed).unwrap(),
            "k"
        );
        assert!(!given.path().join("secrets.key").exists());
        let err = load_env(&[("TRAINYARD_SECRETS_KEY", "0123")]).unwrap_err();
        assert!(
            err.0.starts_with("secrets_key: the key is 3 bytes long"),
            "{}",
            err.0
        );

        // A link in its place is not followed; a damaged file is named.
        let linked = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(&file, linked.path().join("secrets.key")).unwrap();
        let config = load_env(&[("TRAINYARD_DATA_DIR", linked.path().to_str().unwrap())]).unwrap();
        let err = config.sealing_key().unwrap_err();
        assert!(
            err.0.contains("cannot read") && err.0.contains("secrets.key"),
            "{}",
            err.0
        );
        std::fs::write(&file, "damaged\n").unwrap();
        let config = load_env(&[("TRAINYARD_DATA_DIR", data)]).unwrap();
        let err = config.sealing_key().unwrap_err();
        assert!(
            err.0.contains("cannot use") && err.0.contains("neither 64 hexadecimal digits"),
            "{}",
            err.0
        );

        // Rotating: the key replaced opens what it sealed; a bad one stops
        // the start, naming its setting.
        let config = load_env(&[
            ("TRAINYARD_DATA_DIR", given.path().to_str().unwrap()),
            ("TRAINYARD_SECRETS_KEY", &"ab".repeat(32)),
            ("TRAINYARD_SECRETS_KEY_PREVIOUS", text.trim_end()),
        ])
        .unwrap();
        let previous = config.previous_sealing_key().unwrap().unwrap();
        assert_eq!(
            previous
                .open(Purpose::WebhookSecret, "w1", &sealed)
                .unwrap(),
            "k"
        );
        assert!(
            format!("{config:?}").contains("secrets_key_previous: Some(Given(…))"),
            "the key stays out of the logs"
        );
        let err = load_env(&[("TRAINYARD_SECRETS_KEY_PREVIOUS", "0123")]).unwrap_err();
        assert!(
            err.0
                .starts_with("secrets_key_previous: the key is 3 bytes long"),
            "{}",
            err.0
        );
        let none = load_env(&[("TRAINYARD_DATA_DIR", data)]).unwrap();
        assert!(none.previous_sealing_key().unwrap().is_none());
    }

    #[test]
    fn environment_values_are_text_read_as_each_setting_needs() {
        let config = load_env(&[
            ("TRAINYARD_SHUTDOWN_GRACE_SECS", " 7 "),
            ("TRAINYARD_DATABASE_URL", "\"sqlite:///srv/ty.db\""),
            ("TRAINYARD_WEBHOOK_ALLOW_PRIVATE_HOSTS", "true"),
            ("TRAINYARD_SECRETS_KEY", &"0123456789".repeat(7)[..64]),
        ])
        .unwrap();
        assert_eq!(config.shutdown_grace, std::time::Duration::from_secs(7));
        assert_eq!(
            config.database_url, "sqlite:///srv/ty.db",
            "quotes as an env file writes them"
        );
        assert!(config.webhook_allow_private_hosts);
        assert!(
            config.sealing_key().is_ok(),
            "a key of digits alone is text, not a number"
        );
        let err = load_env(&[("TRAINYARD_SHUTDOWN_GRACE_SECS", "soon")]).unwrap_err();
        assert!(err.0.contains("shutdown_grace_secs"), "{}", err.0);
    }

    #[test]
    fn secrets_come_from_files() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("db");
        std::fs::write(&secret, "postgres://ty:s3cret@db:5432/ty\n").unwrap();
        let config =
            load_env(&[("TRAINYARD_DATABASE_URL_FILE", secret.to_str().unwrap())]).unwrap();
        assert_eq!(config.database_url, "postgres://ty:s3cret@db:5432/ty");
        assert_eq!(
            config.database_url_redacted(),
            "postgres://ty:***@db:5432/ty"
        );

        let err = load_env(&[("TRAINYARD_DATABASE_URL_FILE", "/nonexistent/secret")]).unwrap_err();
        assert!(
            err.0
                .starts_with("TRAINYARD_DATABASE_URL_FILE: cannot read"),
            "{}",
            err.0
        );
    }

    #[test]
    fn unknown_keys_are_refused_with_their_name() {
        let err = load_env(&[("TRAINYARD_LISTNE", "127.0.0.1:1")]).unwrap_err();
        assert!(err.0.contains("unknown setting `listne`"), "{}", err.0);
        assert!(err.0.contains("environment"), "{}", err.0);
        assert!(err.0.contains("known settings: listen"), "{}", err.0);

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.toml");
        std::fs::write(&file, "colour = \"blue\"\n").unwrap();
        let err = load_from(Some(&file), &Overrides::default(), &[]).unwrap_err();
        assert!(err.0.contains("unknown setting `colour`"), "{}", err.0);
        assert!(err.0.contains("t.toml"), "{}", err.0);
    }

    #[test]
    fn bad_values_name_their_setting() {
        let err = load_env(&[("TRAINYARD_LISTEN", "localhost")]).unwrap_err();
        assert!(err.0.contains("setting `listen`"), "{}", err.0);
        let err = load_env(&[("TRAINYARD_DATABASE_URL", "mysql://h/db")]).unwrap_err();
        assert!(
            err.0
                .starts_with("database_url: unsupported scheme `mysql`"),
            "{}",
            err.0
        );
        let err = load_env(&[("TRAINYARD_DATABASE_URL", "just-a-file.db")]).unwrap_err();
        assert!(err.0.starts_with("database_url:"), "{}", err.0);
        let err = load_env(&[("TRAINYARD_DATABASE_MAX_CONNECTIONS", "0")]).unwrap_err();
        assert!(err.0.starts_with("database_max_connections"), "{}", err.0);
        let err = load_env(&[("TRAINYARD_LOG", "trainyard=loud")]).unwrap_err();
        assert!(err.0.starts_with("log:"), "{}", err.0);
        let err = load_env(&[("TRAINYARD_JOB_UIDS", "everyone")]).unwrap_err();
        assert!(
            err.0.starts_with("job_uids: `everyone` is not a range"),
            "{}",
            err.0
        );
        let err = load_env(&[("TRAINYARD_JOB_UIDS", "0-100")]).unwrap_err();
        assert!(err.0.contains("root"), "{}", err.0);
        let config = load_env(&[("TRAINYARD_JOB_UIDS", "70000-70099")]).unwrap();
        assert_eq!(
            config.job_uids,
            JobUids::Range(trainyard_jobs::users::UidRange {
                first: 70_000,
                last: 70_099
            })
        );
        assert_eq!(load_env(&[]).unwrap().job_uids, JobUids::Auto);
        let err = load_env(&[("TRAINYARD_JOB_LIMITS", "strict")]).unwrap_err();
        assert!(
            err.0.starts_with("job_limits: `strict` is not one of"),
            "{}",
            err.0
        );
        assert_eq!(load_env(&[]).unwrap().job_limits, JobLimits::Auto);
        assert_eq!(
            load_env(&[("TRAINYARD_JOB_LIMITS", "none")])
                .unwrap()
                .job_limits,
            JobLimits::None
        );
        let err = load_from(
            Some(Path::new("/nonexistent.toml")),
            &Overrides::default(),
            &[],
        )
        .unwrap_err();
        assert!(err.0.contains("/nonexistent.toml"), "{}", err.0);
    }

    #[test]
    fn a_missing_database_folder_is_reported_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/no/such/dir/x.db", dir.path().display());
        let data_dir = dir.path().join("data");
        let config = load_env(&[
            ("TRAINYARD_DATABASE_URL", url.as_str()),
            ("TRAINYARD_DATA_DIR", data_dir.to_str().unwrap()),
        ])
        .unwrap();
        let err = config.prepare_folders().unwrap_err();
        assert!(err.0.starts_with("database_url: the folder"), "{}", err.0);
        assert!(data_dir.is_dir(), "the data folder itself is created");
    }

    #[test]
    fn listening_beyond_loopback_needs_sign_in_or_the_loud_flag() {
        let err = load_env(&[("TRAINYARD_LISTEN", "0.0.0.0:3000")]).unwrap_err();
        assert!(
            err.0.starts_with("listen: 0.0.0.0:3000 is reachable"),
            "{}",
            err.0
        );
        assert!(err.0.contains("oidc_issuer_url") && err.0.contains("insecure_no_sign_in"));
        let open = load_env(&[
            ("TRAINYARD_LISTEN", "0.0.0.0:3000"),
            ("TRAINYARD_INSECURE_NO_SIGN_IN", "true"),
        ])
        .unwrap();
        assert!(open.auth.oidc.is_none() && open.auth.insecure_no_sign_in);

        let sso = load_env(&[
            ("TRAINYARD_LISTEN", "0.0.0.0:3000"),
            ("TRAINYARD_PUBLIC_URL", "https://ty.uni.example/"),
            (
                "TRAINYARD_OIDC_ISSUER_URL",
                "https://idp.uni.example/realms/main",
            ),
            ("TRAINYARD_OIDC_CLIENT_ID", "trainyard"),
            ("TRAINYARD_OIDC_ADMIN_GROUP", "gpu-admins"),
        ])
        .unwrap();
        let oidc = sso.auth.oidc.as_ref().unwrap();
        assert_eq!(oidc.scopes, ["openid", "profile", "email"]);
        assert_eq!(oidc.admin_group.as_deref(), Some("gpu-admins"));
        assert_eq!(sso.auth.public_url.as_str(), "https://ty.uni.example/");
        assert!(sso.auth.secure_cookies());
    }

    #[test]
    fn sign_in_settings_are_checked() {
        let issuer = ("TRAINYARD_OIDC_ISSUER_URL", "https://idp.example");
        let err = load_env(&[issuer]).unwrap_err();
        assert!(err.0.starts_with("oidc_client_id: required"), "{}", err.0);
        let err = load_env(&[
            ("TRAINYARD_OIDC_ISSUER_URL", "http://idp.example"),
            ("TRAINYARD_OIDC_CLIENT_ID", "x"),
        ])
        .unwrap_err();
        assert!(err.0.contains("must use https"), "{}", err.0);
        load_env(&[
            ("TRAINYARD_OIDC_ISSUER_URL", "http://127.0.0.1:9000"),
            ("TRAINYARD_OIDC_CLIENT_ID", "x"),
        ])
        .expect("plain http is fine on loopback");
        let err = load_env(&[
            issuer,
            ("TRAINYARD_OIDC_CLIENT_ID", "x"),
            ("TRAINYARD_OIDC_SCOPES", "profile email"),
        ])
        .unwrap_err();
        assert!(err.0.starts_with("oidc_scopes"), "{}", err.0);
        let err = load_env(&[
            issuer,
            ("TRAINYARD_OIDC_CLIENT_ID", "x"),
            ("TRAINYARD_LISTEN", "0.0.0.0:3000"),
        ])
        .unwrap_err();
        assert!(err.0.starts_with("public_url: required"), "{}", err.0);
        let err =
            load_env(&[("TRAINYARD_PUBLIC_URL", "https://ty.example/trainyard")]).unwrap_err();
        assert!(err.0.contains("without a path"), "{}", err.0);
        let err = load_env(&[("TRAINYARD_SESSION_TTL_SECS", "5")]).unwrap_err();
        assert!(err.0.starts_with("session_ttl_secs"), "{}", err.0);
        let local = load_env(&[]).unwrap();
        assert_eq!(local.auth.public_url.as_str(), "http://127.0.0.1:3000/");
        assert!(!local.auth.secure_cookies());
    }

    #[test]
    fn every_setting_is_documented_in_help_and_readme() {
        let defaults = serde_json::to_value(Settings::default()).unwrap();
        let readme = include_str!("../../README.md");
        let help = help_table();
        for key in defaults.as_object().unwrap().keys() {
            assert!(
                SETTINGS.iter().any(|s| s.key == key),
                "{key} missing from SETTINGS"
            );
        }
        for s in SETTINGS {
            assert!(help.contains(s.env), "{} missing from --help", s.env);
            assert!(readme.contains(s.env), "{} missing from the README", s.env);
        }
    }
}
