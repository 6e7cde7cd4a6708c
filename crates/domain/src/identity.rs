//! Who is acting, and what they may do: the one authorization policy every
//! entry (REST, the MLflow API, server functions, streams, downloads) asks.
//!
//! Things belong to a user and a team. Their owner and the owner's team see
//! them; the owner changes them; admins do everything, and alone manage
//! templates, quotas, nodes and users.

use serde::{Deserialize, Serialize};

use crate::FieldError;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Team {
    pub id: i64,
    pub name: String,
}

/// A signed-in user, or the local admin of a single-user install.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub id: i64,
    pub username: String,
    pub display_name: String,
    pub email: Option<String>,
    pub is_admin: bool,
    pub teams: Vec<Team>,
}

/// Whose a thing is. Things from before sign-in existed have neither, and
/// only admins reach them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Owner {
    pub user_id: Option<i64>,
    pub team_id: Option<i64>,
}

impl Owner {
    pub fn new(user_id: Option<i64>, team_id: Option<i64>) -> Owner {
        Owner { user_id, team_id }
    }
}

impl User {
    pub fn in_team(&self, team_id: i64) -> bool {
        self.teams.iter().any(|t| t.id == team_id)
    }

    /// The team new things are filed under: the first the user belongs to.
    pub fn primary_team(&self) -> Option<i64> {
        self.teams.first().map(|t| t.id)
    }

    /// The owner and the owner's team see a thing; admins see everything.
    pub fn can_read(&self, owner: Owner) -> bool {
        self.is_admin
            || (owner.user_id.is_some() && owner.user_id == Some(self.id))
            || owner.team_id.is_some_and(|t| self.in_team(t))
    }

    /// Only the owner changes a thing; admins change everything.
    pub fn can_change(&self, owner: Owner) -> bool {
        self.is_admin || (owner.user_id.is_some() && owner.user_id == Some(self.id))
    }

    /// The owner of things this user creates now.
    pub fn as_owner(&self) -> Owner {
        Owner::new(Some(self.id), self.primary_team())
    }
}

/// The caller of a request, as the server's gate identified it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub user: User,
    pub via: Via,
}

/// How the caller proved who they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// The single-user mode: no provider, everyone is the local admin.
    Local,
    /// A browser session.
    Session { csrf_token: String },
    /// A personal API token.
    Token,
    /// A job's token: it writes to this run only, and only while the job
    /// runs.
    RunToken { run_id: String },
    /// A node's agent token: it writes that node's GPU samples only.
    NodeToken { node: String },
}

impl Principal {
    /// Came with a browser session (or the single-user mode), not a token:
    /// what making and revoking tokens requires.
    pub fn has_session(&self) -> bool {
        matches!(self.via, Via::Session { .. } | Via::Local)
    }

    /// Job tokens change their own run only; everyone else is held to the
    /// owner rules.
    pub fn run_scope_allows(&self, run_id: &str) -> bool {
        match &self.via {
            Via::RunToken { run_id: own } => own == run_id,
            _ => true,
        }
    }
}

/// A personal API token as listed: never its secret, which is shown once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiToken {
    pub id: i64,
    pub name: String,
    /// The token's first characters, to tell tokens apart.
    pub prefix: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub expires_at: Option<i64>,
}

/// A token just made, with its secret: the only time it is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewApiToken {
    pub token: ApiToken,
    pub secret: String,
}

/// Longest token name, in characters.
pub const MAX_TOKEN_NAME: usize = 100;
/// Longest token lifetime, in days: every token expires, so one that
/// outlives its owner's access does not last for ever.
pub const MAX_TOKEN_DAYS: u32 = 366;
/// A token's lifetime when none is asked for.
pub const DEFAULT_TOKEN_DAYS: u32 = 90;
/// Most live personal tokens one user may hold.
pub const MAX_TOKENS_PER_USER: usize = 50;

/// A request for a new agent token of a node (`POST
/// /api/trainyard/v1/nodes/{node}/tokens`; an empty body asks for one that
/// lasts until it is revoked).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeTokenRequest {
    /// None: it lasts until it is revoked (an agent runs unattended, and
    /// one whose token ended would stop sending without anyone asking).
    #[serde(default)]
    pub expires_in_days: Option<u32>,
}

impl NodeTokenRequest {
    /// The lifetime asked for, checked.
    pub fn check(&self) -> Result<(), FieldError> {
        match self.expires_in_days {
            Some(days) if !(1..=MAX_TOKEN_DAYS).contains(&days) => Err(FieldError::new(
                "expires_in_days",
                format!(
                    "between 1 and {MAX_TOKEN_DAYS} days, or left out for a token that lasts until it is revoked"
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// A request for a new personal token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    pub name: String,
    /// None: [`DEFAULT_TOKEN_DAYS`].
    #[serde(default)]
    pub expires_in_days: Option<u32>,
}

impl TokenRequest {
    /// Every wrong field, with what to do.
    pub fn check(&self) -> Result<(), Vec<FieldError>> {
        let mut errors = Vec::new();
        let name = self.name.trim();
        if name.is_empty() {
            errors.push(FieldError::new(
                "name",
                "give the token a name that says where it is used, e.g. `laptop`",
            ));
        } else if name.chars().count() > MAX_TOKEN_NAME {
            errors.push(FieldError::new(
                "name",
                format!("at most {MAX_TOKEN_NAME} characters"),
            ));
        } else if name.chars().any(char::is_control) {
            errors.push(FieldError::new("name", "no control characters"));
        }
        if let Some(days) = self.expires_in_days
            && !(1..=MAX_TOKEN_DAYS).contains(&days)
        {
            errors.push(FieldError::new(
                "expires_in_days",
                format!("between 1 and {MAX_TOKEN_DAYS} days (left out: {DEFAULT_TOKEN_DAYS})"),
            ));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// A user as admins see them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserSummary {
    pub user: User,
    pub last_login_at: Option<i64>,
    /// Sessions not expired nor ended.
    pub live_sessions: u64,
    /// Personal API tokens neither expired nor revoked: they outlive a
    /// session (90 days by default), and ending sessions revokes them too.
    #[serde(default)]
    pub live_tokens: u64,
}

impl Me {
    pub fn of(principal: &Principal, single_user: bool) -> Me {
        Me {
            user: principal.user.clone(),
            single_user,
            csrf_token: match &principal.via {
                Via::Session { csrf_token } => Some(csrf_token.clone()),
                _ => None,
            },
        }
    }
}

/// Who the server says you are, and how sign-in works here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Me {
    pub user: User,
    /// No identity provider: everyone is the local admin.
    pub single_user: bool,
    /// The session's CSRF token, for scripts that post with the cookie.
    pub csrf_token: Option<String>,
}

/// What an admin (or a person acting on what is not theirs alone) did, as
/// the audit trail keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuditAction {
    TeamCreated,
    TeamChanged,
    NodeDrained,
    NodeResumed,
    NodeRemoved,
    NodeTokenMade,
    NodeTokenRevoked,
    SessionsEnded,
    JobStopped,
    JobMoved,
    TemplateSaved,
    TemplateDeleted,
    WebhookChanged,
    UploadDeleted,
    RunPurged,
    CheckpointsDeleted,
    JobDeleted,
}

impl AuditAction {
    pub const ALL: [AuditAction; 17] = [
        AuditAction::TeamCreated,
        AuditAction::TeamChanged,
        AuditAction::NodeDrained,
        AuditAction::NodeResumed,
        AuditAction::NodeRemoved,
        AuditAction::NodeTokenMade,
        AuditAction::NodeTokenRevoked,
        AuditAction::SessionsEnded,
        AuditAction::JobStopped,
        AuditAction::JobMoved,
        AuditAction::TemplateSaved,
        AuditAction::TemplateDeleted,
        AuditAction::WebhookChanged,
        AuditAction::UploadDeleted,
        AuditAction::RunPurged,
        AuditAction::CheckpointsDeleted,
        AuditAction::JobDeleted,
    ];

    /// As stored and asked for (`?action=`).
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::TeamCreated => "team.create",
            AuditAction::TeamChanged => "team.change",
            AuditAction::NodeDrained => "node.drain",
            AuditAction::NodeResumed => "node.resume",
            AuditAction::NodeRemoved => "node.remove",
            AuditAction::NodeTokenMade => "node_token.create",
            AuditAction::NodeTokenRevoked => "node_token.revoke",
            AuditAction::SessionsEnded => "sessions.end",
            AuditAction::JobStopped => "job.stop",
            AuditAction::JobMoved => "job.move",
            AuditAction::TemplateSaved => "template.save",
            AuditAction::TemplateDeleted => "template.delete",
            AuditAction::WebhookChanged => "webhook.change",
            AuditAction::UploadDeleted => "upload.delete",
            AuditAction::RunPurged => "run.purge",
            AuditAction::CheckpointsDeleted => "checkpoints.delete",
            AuditAction::JobDeleted => "job.delete",
        }
    }

    pub fn parse(text: &str) -> Option<AuditAction> {
        AuditAction::ALL.into_iter().find(|a| a.as_str() == text)
    }

    /// `text` as the `action` a page of the trail is narrowed to, or the
    /// field's error naming those it may be.
    pub fn parse_field(text: &str) -> Result<AuditAction, crate::FieldError> {
        AuditAction::parse(text).ok_or_else(|| {
            let known: Vec<&str> = AuditAction::ALL.iter().map(|a| a.as_str()).collect();
            crate::FieldError::new(
                "action",
                format!(
                    "`{text}` is not an action of the trail; one of {}",
                    known.join(", ")
                ),
            )
        })
    }

    /// In words, for the audit page.
    pub fn words(self) -> &'static str {
        match self {
            AuditAction::TeamCreated => "made a team",
            AuditAction::TeamChanged => "changed a team",
            AuditAction::NodeDrained => "drained a node",
            AuditAction::NodeResumed => "resumed a node",
            AuditAction::NodeRemoved => "removed a node",
            AuditAction::NodeTokenMade => "made a node token",
            AuditAction::NodeTokenRevoked => "revoked a node token",
            AuditAction::SessionsEnded => "ended someone's sessions",
            AuditAction::JobStopped => "stopped someone's job",
            AuditAction::JobMoved => "moved a job to another team",
            AuditAction::TemplateSaved => "saved a template",
            AuditAction::TemplateDeleted => "deleted a template",
            AuditAction::WebhookChanged => "changed a webhook",
            AuditAction::UploadDeleted => "deleted someone's upload",
            AuditAction::RunPurged => "deleted someone's run forever",
            AuditAction::CheckpointsDeleted => "deleted someone's kept checkpoints",
            AuditAction::JobDeleted => "deleted someone's job",
        }
    }
}

/// One entry of the audit trail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEvent {
    pub id: i64,
    /// Unix milliseconds.
    pub time: i64,
    /// The actor's username as it was then.
    pub actor: String,
    /// [`AuditAction::as_str`]; one this version does not know stays text.
    pub action: String,
    /// What it was done to: a team, a node, a person, `job 12`, a template.
    pub target: String,
    /// What changed, in words.
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: i64, admin: bool, teams: &[i64]) -> User {
        User {
            id,
            username: format!("u{id}"),
            display_name: format!("User {id}"),
            email: None,
            is_admin: admin,
            teams: teams
                .iter()
                .map(|&id| Team {
                    id,
                    name: format!("t{id}"),
                })
                .collect(),
        }
    }

    #[test]
    fn owners_read_and_change_their_team_reads_others_nothing() {
        let thing = Owner::new(Some(1), Some(10));
        let owner = user(1, false, &[10]);
        let teammate = user(2, false, &[11, 10]);
        let stranger = user(3, false, &[11]);
        let admin = user(4, true, &[]);
        assert!(owner.can_read(thing) && owner.can_change(thing));
        assert!(teammate.can_read(thing) && !teammate.can_change(thing));
        assert!(!stranger.can_read(thing) && !stranger.can_change(thing));
        assert!(admin.can_read(thing) && admin.can_change(thing));
    }

    #[test]
    fn things_without_an_owner_are_for_admins_only() {
        let orphan = Owner::default();
        assert!(!user(1, false, &[10]).can_read(orphan));
        assert!(!user(1, false, &[10]).can_change(orphan));
        assert!(user(2, true, &[]).can_change(orphan));
    }

    #[test]
    fn token_requests_are_checked_field_by_field() {
        let ok = TokenRequest {
            name: "laptop".to_owned(),
            expires_in_days: Some(30),
        };
        assert!(ok.check().is_ok());
        let bad = TokenRequest {
            name: " ".to_owned(),
            expires_in_days: Some(0),
        };
        let fields: Vec<String> = bad
            .check()
            .unwrap_err()
            .into_iter()
            .map(|f| f.field)
            .collect();
        assert_eq!(fields, ["name", "expires_in_days"]);
        let long = TokenRequest {
            name: "x".repeat(MAX_TOKEN_NAME + 1),
            expires_in_days: Some(MAX_TOKEN_DAYS + 1),
        };
        assert_eq!(long.check().unwrap_err().len(), 2);
    }

    #[test]
    fn new_things_are_filed_under_the_first_team() {
        assert_eq!(
            user(5, false, &[7, 8]).as_owner(),
            Owner::new(Some(5), Some(7))
        );
        assert_eq!(user(5, false, &[]).as_owner(), Owner::new(Some(5), None));
    }
}
