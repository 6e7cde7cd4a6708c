//! Per-person storage quotas: what one person's uploads and the artifacts
//! of their runs may hold in all (`upload_quota_bytes`,
//! `upload_quota_entries`, `artifact_quota_bytes`), refused with 507 saying
//! what is used and what to do.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::StatusCode;
use trainyard_domain::{format_bytes, format_count};
use trainyard_jobs::tree::MAX_COUNTED;
use trainyard_store::Store;

use crate::mlflow::ApiError;

/// What a quota counts, and how its figures are written.
#[derive(Clone, Copy)]
pub enum Unit {
    /// Bytes, as "3.0 GiB".
    Bytes,
    /// Things, as "10,000", with their name after what is used ("files and
    /// folders").
    Count(&'static str),
}

impl Unit {
    fn figure(self, n: u64) -> String {
        match self {
            Unit::Bytes => format_bytes(n),
            Unit::Count(_) => format_count(i64::try_from(n).unwrap_or(i64::MAX)),
        }
    }

    fn used(self, n: u64) -> String {
        match self {
            Unit::Bytes => format_bytes(n),
            Unit::Count(of) => format!("{} {of}", self.figure(n)),
        }
    }
}

/// 507 Insufficient Storage: `what` holds `used` and `adding` more would
/// pass `quota` (None: it holds the quota, or more, already).
pub fn exhausted(
    what: &str,
    unit: Unit,
    used: u64,
    adding: Option<u64>,
    quota: u64,
    setting: &str,
    remedy: &str,
) -> ApiError {
    let bound = match adding {
        Some(n) => format!(
            ", and this one adds {}: past the {}",
            unit.figure(n),
            unit.figure(quota)
        ),
        None => format!(", and {} is the most", unit.figure(quota)),
    };
    ApiError {
        status: StatusCode::INSUFFICIENT_STORAGE,
        code: "RESOURCE_EXHAUSTED",
        message: format!(
            "{what} hold {}{bound} each person may keep ({setting}); {remedy}",
            unit.used(used),
        ),
    }
}

/// What the artifacts of each person's runs, logged models and traces
/// hold: counted from disk the first time a person's is needed, then kept
/// by this process's writes and removals. What this process cannot see (a
/// second server during a rollout, files removed by hand, traces deleted
/// with their files) is caught by counting again: a count older than
/// [`RECOUNT_AFTER`] is not trusted, and neither is one that would refuse a
/// write. Writes and removals of one person's artifacts take turns
/// ([`ArtifactUsage::turn`]), so the count and the check stay true under
/// parallel requests.
#[derive(Clone, Default)]
pub struct ArtifactUsage {
    used: Arc<std::sync::Mutex<HashMap<i64, Counted>>>,
    turns: Arc<std::sync::Mutex<HashMap<i64, Arc<tokio::sync::Mutex<()>>>>>,
}

/// How long a person's count is trusted before it is taken from disk
/// again.
pub const RECOUNT_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

#[derive(Clone, Copy)]
struct Counted {
    bytes: u64,
    at: std::time::Instant,
    /// When a count from disk last refused a write, if none of this
    /// process's writes or removals came since.
    refused: Option<std::time::Instant>,
}

/// The least time between two counts from disk for refused writes when
/// nothing changed between them: a client cannot make the server walk
/// someone's artifacts on every request.
pub const RECOUNT_AT_MOST_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

impl ArtifactUsage {
    /// The turn of `owner`'s writes and removals: hold it from the check to
    /// the count.
    pub async fn turn(&self, owner: i64) -> tokio::sync::OwnedMutexGuard<()> {
        let turn = {
            let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
            turns.entry(owner).or_default().clone()
        };
        turn.lock_owned().await
    }

    /// Bytes the artifacts of `owner`'s runs hold; call it in `owner`'s turn.
    pub async fn used(&self, store: &Store, root: &Path, owner: i64) -> Result<u64, ApiError> {
        if let Some(known) = self.known(owner) {
            return Ok(known);
        }
        let runs = store.runs_owned_by(owner).await?;
        let models = store.logged_models_owned_by(owner).await?;
        let traces = store.traces_owned_by(owner).await?;
        let folders: Vec<PathBuf> = runs
            .into_iter()
            .map(|(experiment, run)| {
                root.join(experiment.to_string())
                    .join(run)
                    .join("artifacts")
            })
            .chain(models.into_iter().map(|(experiment, model)| {
                root.join(experiment.to_string())
                    .join("models")
                    .join(model)
                    .join("artifacts")
            }))
            .chain(traces.into_iter().map(|(experiment, trace)| {
                root.join(experiment.to_string())
                    .join("traces")
                    .join(trace)
                    .join("artifacts")
            }))
            .collect();
        let counted = tokio::task::spawn_blocking(move || size_of_trees(&folders))
            .await
            .map_err(ApiError::internal)?;
        let mut map = self.used.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(
            owner,
            Counted {
                bytes: counted,
                at: std::time::Instant::now(),
                refused: None,
            },
        );
        Ok(counted)
    }

    fn known(&self, owner: i64) -> Option<u64> {
        let map = self.used.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&owner)
            .filter(|c| c.at.elapsed() < RECOUNT_AFTER)
            .map(|c| c.bytes)
    }

    /// Whether a refused write may have `owner`'s artifacts counted from
    /// disk again: not within [`RECOUNT_AT_MOST_EVERY`] of a count that
    /// refused too, unless this process wrote or removed some since.
    pub fn may_recount(&self, owner: i64) -> bool {
        let map = self.used.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&owner).is_none_or(|c| {
            c.refused
                .is_none_or(|at| at.elapsed() >= RECOUNT_AT_MOST_EVERY)
        })
    }

    /// Notes that a count just taken from disk refused a write.
    pub fn refused(&self, owner: i64) {
        let mut map = self.used.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(counted) = map.get_mut(&owner) {
            counted.refused = Some(std::time::Instant::now());
        }
    }

    /// Drops `owner`'s count: the next need counts from disk.
    pub fn forget(&self, owner: i64) {
        let mut map = self.used.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&owner);
    }

    /// Records a write (`delta` > 0) or a removal (< 0) of `owner`'s. An
    /// owner not counted yet is counted from disk when first needed.
    pub fn add(&self, owner: i64, delta: i64) {
        let mut map = self.used.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(used) = map.get_mut(&owner) {
            used.bytes = used.bytes.saturating_add_signed(delta);
            used.refused = None;
        }
    }
}

/// What `owner`'s storage holds against their quotas: their artifacts as
/// the quota counts them (in their turn), what their deleted runs hold of
/// those by experiment, and their uploads.
pub async fn storage_of(
    state: &crate::AppState,
    owner: i64,
) -> Result<trainyard_domain::teams::StorageView, ApiError> {
    use trainyard_domain::teams::{DeletedRunsHeld, StorageView};
    let artifact_bytes = {
        let _turn = state.artifact_usage.turn(owner).await;
        state
            .artifact_usage
            .used(&state.store, &state.artifact_root, owner)
            .await?
    };
    let root = state.artifact_root.clone();
    let deleted = state.store.deleted_runs_owned_by(owner).await?;
    let deleted = tokio::task::spawn_blocking(move || {
        // One bound for them all, as for the quota's own count.
        let mut budget = MAX_COUNTED;
        let mut held: Vec<DeletedRunsHeld> = deleted
            .into_iter()
            .map(|(experiment_id, experiment, runs)| {
                let folders: Vec<PathBuf> = runs
                    .iter()
                    .map(|run| {
                        root.join(experiment_id.to_string())
                            .join(run)
                            .join("artifacts")
                    })
                    .collect();
                DeletedRunsHeld {
                    experiment_id,
                    experiment,
                    runs: runs.len() as u64,
                    bytes: {
                        let (bytes, seen) = trainyard_jobs::tree::file_bytes(&folders, budget);
                        budget = budget.saturating_sub(seen);
                        bytes
                    },
                }
            })
            .collect();
        held.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(a.experiment_id.cmp(&b.experiment_id))
        });
        held
    })
    .await
    .map_err(ApiError::internal)?;
    let uploads = state.store.uploads_of(owner).await?.len() as u64;
    let used = state.store.upload_use_of(owner).await?;
    let checkpoints = state.store.kept_checkpoints_of(owner).await?;
    Ok(StorageView {
        artifact_bytes,
        artifact_quota_bytes: state.artifact_quota_bytes,
        deleted,
        uploads,
        upload_bytes: used.bytes,
        upload_quota_bytes: state.upload_quota_bytes,
        upload_entries: used.entries,
        upload_quota_entries: state.upload_quota_entries,
        checkpoints,
    })
}

/// `GET /api/trainyard/v1/storage`: what the caller's storage holds
/// against their quotas ([`storage_of`]).
pub async fn storage(
    axum::extract::State(state): axum::extract::State<crate::AppState>,
    crate::auth::Caller(principal): crate::auth::Caller,
) -> Result<axum::Json<trainyard_domain::teams::StorageView>, ApiError> {
    Ok(axum::Json(storage_of(&state, principal.user.id).await?))
}

/// The bytes of the files below `path` (a file: its own), links not
/// followed.
pub fn size_of_tree(path: &Path) -> u64 {
    size_of_trees(std::slice::from_ref(&path.to_path_buf()))
}

/// The bytes of the files below each of `paths`, links not followed, at
/// most [`MAX_COUNTED`] entries in all.
pub fn size_of_trees(paths: &[PathBuf]) -> u64 {
    let (total, seen) = trainyard_jobs::tree::file_bytes(paths, MAX_COUNTED);
    if seen > MAX_COUNTED {
        tracing::warn!("stopped counting artifacts after {MAX_COUNTED} entries");
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_sized_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/one"), vec![0u8; 100]).unwrap();
        std::fs::write(dir.path().join("a/b/two"), vec![0u8; 23]).unwrap();
        let big = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(big.path(), vec![0u8; 10_000]).unwrap();
        std::os::unix::fs::symlink(big.path(), dir.path().join("a/link")).unwrap();
        assert_eq!(size_of_tree(dir.path()), 123);
        assert_eq!(size_of_tree(&dir.path().join("a/one")), 100);
        assert_eq!(size_of_tree(&dir.path().join("missing")), 0);
    }

    #[test]
    fn the_message_says_what_is_used_and_allowed() {
        let error = exhausted(
            "your uploads",
            Unit::Bytes,
            3 << 30,
            Some(1 << 20),
            2 << 30,
            "upload_quota_bytes",
            "delete some",
        );
        assert_eq!(error.status, StatusCode::INSUFFICIENT_STORAGE);
        assert_eq!(
            error.message,
            "your uploads hold 3.0 GiB, and this one adds 1.0 MiB: past the 2.0 GiB each \
             person may keep (upload_quota_bytes); delete some"
        );
        let full = exhausted(
            "your uploads",
            Unit::Bytes,
            2 << 30,
            None,
            2 << 30,
            "upload_quota_bytes",
            "delete some",
        );
        assert_eq!(
            full.message,
            "your uploads hold 2.0 GiB, and 2.0 GiB is the most each person may keep \
             (upload_quota_bytes); delete some"
        );
        let files = Unit::Count("files and folders");
        let counted = exhausted("your uploads", files, 31, Some(12_000), 50, "q", "delete");
        assert_eq!(
            counted.message,
            "your uploads hold 31 files and folders, and this one adds 12,000: past the 50 \
             each person may keep (q); delete"
        );
        let full = exhausted(
            "your uploads",
            files,
            1_000_000,
            None,
            1_000_000,
            "q",
            "delete",
        );
        assert_eq!(
            full.message,
            "your uploads hold 1,000,000 files and folders, and 1,000,000 is the most each \
             person may keep (q); delete"
        );
    }
}
