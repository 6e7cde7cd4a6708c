//! Teams as the queue sees them: the GPUs each is guaranteed, its
//! fair-share weight, and the GPU-hours teams and people used.

use serde::{Deserialize, Serialize};

use crate::FieldError;

/// The most GPUs a team may be guaranteed.
pub const MAX_QUOTA_GPUS: u32 = 100_000;
/// Fair-share weights go from this to its inverse.
pub const MIN_SHARE: f64 = 0.01;
pub const MAX_SHARE: f64 = 100.0;

/// A team's place in the queue, as admins set it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamPolicy {
    pub id: i64,
    pub name: String,
    /// GPUs the team may always use, taking them back from teams that
    /// borrowed them. 0: none guaranteed; it runs on idle GPUs.
    pub quota_gpus: u32,
    /// Fair-share weight: a team's usage counts divided by it (2 gets twice
    /// the GPU time of 1 when both wait).
    pub share: f64,
    pub members: u32,
    /// GPUs its jobs hold now, and how many of them are borrowed.
    #[serde(default)]
    pub gpus_in_use: u32,
    #[serde(default)]
    pub gpus_borrowed: u32,
    /// Decayed GPU-hours (what fair share compares).
    #[serde(default)]
    pub decayed_gpu_hours: f64,
    /// Its queued jobs that may not be preempted and ask for more GPUs
    /// than its guarantee (lowered after they were submitted): they start
    /// only once it is raised, or they move to another team.
    #[serde(default)]
    pub waiting_beyond_guarantee: Vec<i64>,
}

/// What an admin changes of a team; what is left out stays.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamPolicyChange {
    #[serde(default)]
    pub quota_gpus: Option<u32>,
    #[serde(default)]
    pub share: Option<f64>,
}

impl TeamPolicyChange {
    pub fn check(&self) -> Result<(), Vec<FieldError>> {
        let mut errors = Vec::new();
        if let Some(q) = self.quota_gpus
            && q > MAX_QUOTA_GPUS
        {
            errors.push(FieldError::new(
                "quota_gpus",
                format!("is {q}; give a whole number of GPUs from 0 to {MAX_QUOTA_GPUS}"),
            ));
        }
        if let Some(s) = self.share
            && !(s.is_finite() && (MIN_SHARE..=MAX_SHARE).contains(&s))
        {
            errors.push(FieldError::new(
                "share",
                format!("is {s}; give a weight from {MIN_SHARE} to {MAX_SHARE} (1 is the default)"),
            ));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// The longest team name: as long as a group name sign-in takes.
pub const MAX_TEAM_NAME: usize = 250;

/// A team an admin makes by hand, before anyone of it signs in: its name is
/// the identity provider's group whose members join it at sign-in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTeam {
    pub name: String,
    #[serde(default)]
    pub quota_gpus: Option<u32>,
    #[serde(default)]
    pub share: Option<f64>,
}

impl NewTeam {
    /// The name as kept, and every field's error. It is kept as sign-in
    /// reads group names: trimmed, and without the leading `/` of
    /// Keycloak's full group paths (`/robotics` is the group `robotics`),
    /// so that the team is the one its members join.
    pub fn check(&self) -> Result<String, Vec<FieldError>> {
        let name = self.name.trim().trim_start_matches('/');
        let mut errors = Vec::new();
        if name.is_empty() {
            errors.push(FieldError::new(
                "name",
                "is empty; give the identity provider's group name whose members form the team",
            ));
        } else if name.chars().count() > MAX_TEAM_NAME {
            errors.push(FieldError::new(
                "name",
                format!("is longer than {MAX_TEAM_NAME} characters"),
            ));
        } else if name.chars().any(char::is_control) {
            errors.push(FieldError::new(
                "name",
                "holds a control character (a line break, a tab); give the group name as the provider sends it",
            ));
        }
        let policy = TeamPolicyChange {
            quota_gpus: self.quota_gpus,
            share: self.share,
        };
        if let Err(more) = policy.check() {
            errors.extend(more);
        }
        if errors.is_empty() {
            Ok(name.to_owned())
        } else {
            Err(errors)
        }
    }
}

/// How long each bar of the usage chart is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsagePeriod {
    Day,
    Week,
    Month,
}

impl UsagePeriod {
    pub fn parse(text: &str) -> Option<UsagePeriod> {
        match text {
            "day" => Some(UsagePeriod::Day),
            "week" => Some(UsagePeriod::Week),
            "month" => Some(UsagePeriod::Month),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            UsagePeriod::Day => "day",
            UsagePeriod::Week => "week",
            UsagePeriod::Month => "month",
        }
    }
}

/// GPU-hours of one team and person in one period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRow {
    /// The period's first millisecond (UTC).
    pub period_start: i64,
    pub team: Option<String>,
    pub user: Option<String>,
    pub gpu_hours: f64,
}

/// What the usage page draws: GPU-hours of the periods from `from` on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageView {
    pub period: UsagePeriod,
    pub from: i64,
    pub to: i64,
    /// Each period's first millisecond, oldest first.
    pub periods: Vec<i64>,
    pub rows: Vec<UsageRow>,
    /// The viewer sees everyone's (an admin), not only their own and their
    /// teams'.
    pub everyone: bool,
}

/// What one person's storage holds against their quotas (the usage page,
/// `GET /api/trainyard/v1/storage`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StorageView {
    /// The artifacts of their runs, logged models and traces, as the
    /// artifact quota counts them (file lengths).
    pub artifact_bytes: u64,
    /// None: no quota.
    pub artifact_quota_bytes: Option<u64>,
    /// What their deleted runs hold of those, by experiment, most first:
    /// deleted forever, the room is theirs again.
    pub deleted: Vec<DeletedRunsHeld>,
    /// Their uploads (projects and datasets) and what they hold unpacked.
    pub uploads: u64,
    pub upload_bytes: u64,
    pub upload_quota_bytes: Option<u64>,
    pub upload_entries: u64,
    pub upload_quota_entries: Option<u64>,
    /// The checkpoints their ended jobs left, kept for a while for a job
    /// to resume from; the first to go first.
    #[serde(default)]
    pub checkpoints: Vec<crate::job::KeptCheckpoints>,
}

/// Deleted runs of one person in one experiment, and their artifacts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeletedRunsHeld {
    pub experiment_id: i64,
    pub experiment: String,
    pub runs: u64,
    pub bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_team_is_named_as_sign_in_reads_its_group() {
        let named = |name: &str| {
            NewTeam {
                name: name.to_owned(),
                quota_gpus: None,
                share: None,
            }
            .check()
        };
        assert_eq!(named(" /robotics ").unwrap(), "robotics");
        assert_eq!(named("vision").unwrap(), "vision");
        assert_eq!(named("/").unwrap_err()[0].field, "name");
    }

    #[test]
    fn changes_out_of_range_name_their_field() {
        let bad = TeamPolicyChange {
            quota_gpus: Some(MAX_QUOTA_GPUS + 1),
            share: Some(0.0),
        };
        let errors = bad.check().unwrap_err();
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].field, "quota_gpus");
        assert_eq!(errors[1].field, "share");
        assert!(
            TeamPolicyChange {
                quota_gpus: Some(4),
                share: Some(f64::NAN)
            }
            .check()
            .is_err()
        );
        assert!(
            TeamPolicyChange {
                quota_gpus: Some(4),
                share: Some(2.0)
            }
            .check()
            .is_ok()
        );
    }
}
