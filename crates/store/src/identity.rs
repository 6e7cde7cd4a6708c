//! Accounts, teams, sessions, sign-ins in progress and API tokens.
//!
//! Secrets (session cookies, tokens) are 32 random bytes. Only their SHA-256
//! is stored, so a copy of the database lets no one in.

use std::time::Duration;

use base64::Engine as _;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    Set,
};
use sha2::{Digest, Sha256};
use trainyard_domain::identity::{
    ApiToken, DEFAULT_TOKEN_DAYS, MAX_TOKENS_PER_USER, NewApiToken, Owner, Team, TokenRequest,
    User, UserSummary,
};

use crate::entity::{api_token, login_attempt, membership, session, team, user};
use crate::seal::Purpose;
use crate::{Store, StoreError, now_millis};

/// Who the identity provider says signed in.
#[derive(Debug, Clone)]
pub struct SignIn {
    /// The provider's `sub`: what ties the account to the person.
    pub subject: String,
    pub username: String,
    pub display_name: String,
    pub email: Option<String>,
    pub is_admin: bool,
    /// Group names; each becomes a team the user is a member of.
    pub groups: Vec<String>,
}

/// A sign-in in progress, waiting for the provider to send the browser back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginAttempt {
    pub state: String,
    pub nonce: String,
    /// The hash of the secret in the starting browser's sign-in cookie.
    pub browser: String,
    pub pkce_verifier: String,
    pub return_to: String,
}

/// A session just opened: the cookie's secret and the CSRF token.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub secret: String,
    pub csrf_token: String,
    pub expires_at: i64,
}

/// SQL NULL for a text column: a session's refresh token dropped.
fn no_token() -> sea_orm::sea_query::SimpleExpr {
    Expr::value(Option::<String>::None)
}

/// A session claimed to be checked with the provider again.
#[derive(Debug, Clone)]
pub struct DueSession {
    /// The session's key (the hash of its secret).
    pub id: String,
    pub user_id: i64,
    /// The provider's subject of the session's person.
    pub subject: String,
    pub refresh_token: String,
    /// The token as stored (sealed), which a change must still find.
    stored_token: String,
}

/// A live session and its user.
#[derive(Debug, Clone)]
pub struct SessionUser {
    pub user: User,
    /// The single-user mode's admin, not an account of the provider.
    pub local: bool,
    pub csrf_token: String,
    pub expires_at: i64,
}

/// The most live agent tokens one node may hold.
pub const MAX_TOKENS_PER_NODE: usize = 8;

/// The user behind a token, and the run it is limited to, if any.
#[derive(Debug, Clone)]
pub struct TokenUser {
    pub user: User,
    /// The single-user mode's admin, not an account of the provider.
    pub local: bool,
    pub token_id: i64,
    pub run_id: Option<String>,
    /// The node whose agent the token is, if it is one.
    pub node: Option<String>,
}

/// The subject of the single-user install's admin (no provider).
pub const LOCAL_SUBJECT: &str = "trainyard:local";
/// How long a sign-in may take at the provider.
pub const LOGIN_MAX_AGE: Duration = Duration::from_secs(600);
/// Most groups taken from one sign-in.
pub const MAX_GROUPS: usize = 200;
/// Personal tokens start with this, so leaked ones are easy to scan for.
pub const TOKEN_PREFIX: &str = "ty_";
/// How often a session's or token's last use is written, at most.
const TOUCH_EVERY_MS: i64 = 60_000;

/// 32 random bytes from the operating system, URL-safe base64.
pub fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// What is stored of a secret.
pub fn secret_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

pub(crate) fn clip(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

impl Store {
    /// Records a sign-in: creates or updates the account tied to the
    /// subject, and makes its teams exactly the groups given.
    pub async fn sign_in(&self, who: SignIn) -> Result<User, StoreError> {
        self.record_identity(who, true).await
    }

    /// Makes the account of `who.subject` what the provider says; creates
    /// it only at a sign-in (`signed_in`), which is also recorded as the
    /// last sign-in.
    async fn record_identity(&self, who: SignIn, signed_in: bool) -> Result<User, StoreError> {
        if who.subject.is_empty() || who.username.is_empty() {
            return Err(StoreError::Rejected(
                "the identity provider sent no subject or no username".to_owned(),
            ));
        }
        let _turn = self.write_turn().await;
        let tx = self.begin_write().await?;
        let now = now_millis();
        let taken = user::Entity::find()
            .filter(user::Column::Username.eq(clip(&who.username, 250)))
            .one(&tx)
            .await?;
        if let Some(other) = &taken
            && other.subject.as_deref() != Some(who.subject.as_str())
        {
            return Err(StoreError::Conflict {
                what: format!(
                    "the username `{}` belongs to another account; an admin must rename one of them",
                    who.username
                ),
            });
        }
        let existing = user::Entity::find()
            .filter(user::Column::Subject.eq(who.subject.clone()))
            .one(&tx)
            .await?;
        let mut model = match existing {
            Some(m) => m.into(),
            None if !signed_in => {
                return Err(StoreError::NotFound(format!(
                    "no account has the subject {}",
                    who.subject
                )));
            }
            None => user::ActiveModel {
                subject: Set(Some(who.subject.clone())),
                created_at: Set(now),
                ..Default::default()
            },
        };
        model.username = Set(clip(&who.username, 250));
        model.display_name = Set(clip(
            if who.display_name.is_empty() {
                &who.username
            } else {
                &who.display_name
            },
            250,
        ));
        model.email = Set(who.email.map(|e| clip(&e, 320)));
        model.is_admin = Set(who.is_admin);
        if signed_in {
            model.last_login_at = Set(Some(now));
        }
        let saved = model.save(&tx).await?;
        let user_id = saved.id.unwrap();

        let mut groups: Vec<String> = who
            .groups
            .iter()
            .map(|g| g.trim())
            .filter(|g| !g.is_empty() && g.chars().count() <= 250)
            .map(str::to_owned)
            .collect();
        groups.sort();
        groups.dedup();
        groups.truncate(MAX_GROUPS);
        let mut team_ids = Vec::with_capacity(groups.len());
        for name in &groups {
            let found = team::Entity::find()
                .filter(team::Column::Name.eq(name.clone()))
                .one(&tx)
                .await?;
            let id = match found {
                Some(t) => t.id,
                None => {
                    team::ActiveModel {
                        name: Set(name.clone()),
                        gpu_quota: Set(None),
                        priority: Set(0),
                        created_at: Set(now),
                        ..Default::default()
                    }
                    .insert(&tx)
                    .await?
                    .id
                }
            };
            team_ids.push(id);
        }
        membership::Entity::delete_many()
            .filter(membership::Column::UserId.eq(user_id))
            .filter(membership::Column::TeamId.is_not_in(team_ids.clone()))
            .exec(&tx)
            .await?;
        let current: Vec<i64> = membership::Entity::find()
            .filter(membership::Column::UserId.eq(user_id))
            .all(&tx)
            .await?
            .into_iter()
            .map(|m| m.team_id)
            .collect();
        for team_id in team_ids.into_iter().filter(|t| !current.contains(t)) {
            membership::ActiveModel {
                team_id: Set(team_id),
                user_id: Set(user_id),
                role: Set("member".to_owned()),
            }
            .insert(&tx)
            .await?;
        }
        tx.commit().await?;
        self.user(user_id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("user {user_id}")))
    }

    /// The admin of a single-user install (no identity provider), created
    /// on first use.
    pub async fn local_admin(&self) -> Result<User, StoreError> {
        let found = user::Entity::find()
            .filter(user::Column::Subject.eq(LOCAL_SUBJECT))
            .one(self.connection())
            .await?;
        if let Some(m) = found {
            return self.with_teams(m).await;
        }
        self.sign_in(SignIn {
            subject: LOCAL_SUBJECT.to_owned(),
            username: "local".to_owned(),
            display_name: "Local admin".to_owned(),
            email: None,
            is_admin: true,
            groups: Vec::new(),
        })
        .await
    }

    pub async fn user(&self, id: i64) -> Result<Option<User>, StoreError> {
        Ok(self.user_and_origin(id).await?.map(|(user, _)| user))
    }

    /// The user, and whether it is the single-user mode's admin.
    async fn user_and_origin(&self, id: i64) -> Result<Option<(User, bool)>, StoreError> {
        match user::Entity::find_by_id(id).one(self.connection()).await? {
            Some(m) => {
                let local = m.subject.as_deref() == Some(LOCAL_SUBJECT);
                Ok(Some((self.with_teams(m).await?, local)))
            }
            None => Ok(None),
        }
    }

    async fn with_teams(&self, m: user::Model) -> Result<User, StoreError> {
        let ids: Vec<i64> = membership::Entity::find()
            .filter(membership::Column::UserId.eq(m.id))
            .all(self.connection())
            .await?
            .into_iter()
            .map(|m| m.team_id)
            .collect();
        let teams = if ids.is_empty() {
            Vec::new()
        } else {
            team::Entity::find()
                .filter(team::Column::Id.is_in(ids))
                .order_by_asc(team::Column::Name)
                .all(self.connection())
                .await?
                .into_iter()
                .map(team_from_model)
                .collect()
        };
        Ok(User {
            id: m.id,
            username: m.username,
            display_name: m.display_name,
            email: m.email,
            is_admin: m.is_admin,
            teams,
        })
    }

    /// Opens a session for a user.
    pub async fn create_session(
        &self,
        user_id: i64,
        ttl: Duration,
        id_token: Option<String>,
    ) -> Result<NewSession, StoreError> {
        self.create_provider_session(user_id, ttl, id_token, None)
            .await
    }

    /// Opens a session from a sign-in at the provider, keeping its refresh
    /// token (when it gave one) to read the person's groups again later.
    pub async fn create_provider_session(
        &self,
        user_id: i64,
        ttl: Duration,
        id_token: Option<String>,
        refresh_token: Option<String>,
    ) -> Result<NewSession, StoreError> {
        let secret = random_secret();
        let refresh_token = refresh_token
            .map(|t| self.seal(Purpose::RefreshToken, &secret_hash(&secret), &t))
            .transpose()?;
        let csrf_token = random_secret();
        let now = now_millis();
        let expires_at = now.saturating_add(ttl.as_millis() as i64);
        let _turn = self.write_turn().await;
        session::ActiveModel {
            id: Set(secret_hash(&secret)),
            user_id: Set(user_id),
            csrf_token: Set(csrf_token.clone()),
            created_at: Set(now),
            expires_at: Set(expires_at),
            last_seen_at: Set(now),
            revoked_at: Set(None),
            id_token: Set(id_token),
            checked_at: Set(refresh_token.as_ref().map(|_| now)),
            refresh_token: Set(refresh_token),
        }
        .insert(self.connection())
        .await?;
        Ok(NewSession {
            secret,
            csrf_token,
            expires_at,
        })
    }

    /// The live session a cookie's secret opens: not expired, not revoked.
    pub async fn session(&self, secret: &str) -> Result<Option<SessionUser>, StoreError> {
        let Some(found) = session::Entity::find_by_id(secret_hash(secret))
            .one(self.connection())
            .await?
        else {
            return Ok(None);
        };
        let now = now_millis();
        if found.revoked_at.is_some() || found.expires_at <= now {
            return Ok(None);
        }
        let Some((user, local)) = self.user_and_origin(found.user_id).await? else {
            return Ok(None);
        };
        if now - found.last_seen_at > TOUCH_EVERY_MS {
            let _turn = self.write_turn().await;
            session::Entity::update_many()
                .col_expr(session::Column::LastSeenAt, Expr::value(now))
                .filter(session::Column::Id.eq(found.id.clone()))
                .exec(self.connection())
                .await?;
        }
        Ok(Some(SessionUser {
            user,
            local,
            csrf_token: found.csrf_token,
            expires_at: found.expires_at,
        }))
    }

    /// Ends a session; returns the ID token it was opened with, for the
    /// provider's sign-out.
    pub async fn end_session(&self, secret: &str) -> Result<Option<String>, StoreError> {
        let id = secret_hash(secret);
        let found = session::Entity::find_by_id(id.clone())
            .one(self.connection())
            .await?;
        let _turn = self.write_turn().await;
        session::Entity::update_many()
            .col_expr(session::Column::RevokedAt, Expr::value(now_millis()))
            .col_expr(session::Column::RefreshToken, no_token())
            .filter(session::Column::Id.eq(id))
            .filter(session::Column::RevokedAt.is_null())
            .exec(self.connection())
            .await?;
        Ok(found.and_then(|s| s.id_token))
    }

    /// Live sessions with a refresh token that the provider last vouched
    /// for before `before` (ms), the longest unchecked first, at most
    /// `limit`. Each is claimed (its check time set to now) so that two
    /// server processes do not spend one refresh token together: providers
    /// that rotate them take a reuse for theft and end the grant.
    pub async fn claim_sessions_to_recheck(
        &self,
        before: i64,
        limit: u64,
    ) -> Result<Vec<DueSession>, StoreError> {
        self.forget_refresh_tokens(true).await?;
        let now = now_millis();
        let found = session::Entity::find()
            .filter(session::Column::RevokedAt.is_null())
            .filter(session::Column::ExpiresAt.gt(now))
            .filter(session::Column::RefreshToken.is_not_null())
            .filter(session::Column::CheckedAt.lt(before))
            .order_by_asc(session::Column::CheckedAt)
            .limit(limit)
            .all(self.connection())
            .await?;
        let users: std::collections::HashMap<i64, Option<String>> = user::Entity::find()
            .filter(user::Column::Id.is_in(found.iter().map(|s| s.user_id)))
            .all(self.connection())
            .await?
            .into_iter()
            .map(|u| (u.id, u.subject))
            .collect();
        let mut due = Vec::with_capacity(found.len());
        let _turn = self.write_turn().await;
        for s in found {
            let subject = users.get(&s.user_id).cloned().flatten();
            let mut claim = session::Entity::update_many()
                .col_expr(session::Column::CheckedAt, Expr::value(now))
                .filter(session::Column::Id.eq(s.id.clone()))
                .filter(session::Column::CheckedAt.eq(s.checked_at))
                .filter(session::Column::RevokedAt.is_null());
            if subject.is_none() {
                // No account of the provider's to ask about: never due again.
                claim = claim.col_expr(session::Column::RefreshToken, no_token());
            }
            let claimed = claim.exec(self.connection()).await?.rows_affected == 1;
            let (true, Some(subject), Some(stored_token)) = (claimed, subject, s.refresh_token)
            else {
                continue;
            };
            match self.open_sealed(Purpose::RefreshToken, &s.id, &stored_token) {
                Ok(refresh_token) => due.push(DueSession {
                    id: s.id,
                    user_id: s.user_id,
                    subject,
                    refresh_token,
                    stored_token,
                }),
                Err(e) => {
                    // Not checked, the session would keep its rights
                    // unchecked until it expires: it ends instead, and its
                    // person signs in again.
                    tracing::warn!(user_id = s.user_id, error = %e, "a session's refresh token cannot be read; the session ends");
                    session::Entity::update_many()
                        .col_expr(session::Column::RevokedAt, Expr::value(now))
                        .col_expr(session::Column::RefreshToken, no_token())
                        .filter(session::Column::Id.eq(s.id))
                        .exec(self.connection())
                        .await?;
                }
            }
        }
        Ok(due)
    }

    /// Drops the provider's refresh tokens: of sessions that expired, or
    /// (`expired_only` false, when checks are turned off) of every session.
    pub async fn forget_refresh_tokens(&self, expired_only: bool) -> Result<u64, StoreError> {
        let _turn = self.write_turn().await;
        let mut update = session::Entity::update_many()
            .col_expr(session::Column::RefreshToken, no_token())
            .filter(session::Column::RefreshToken.is_not_null());
        if expired_only {
            update = update.filter(session::Column::ExpiresAt.lte(now_millis()));
        }
        Ok(update.exec(self.connection()).await?.rows_affected)
    }

    /// The provider vouched for a session again: keeps the refresh token it
    /// rotated to, and makes the person's account, admin right and teams
    /// what it now says (`who`, when it said). Nothing is written, and None
    /// returned, when the session ended meanwhile (signed out, revoked) or
    /// its token is no longer the one spent.
    pub async fn session_rechecked(
        &self,
        due: &DueSession,
        who: Option<SignIn>,
        refresh_token: Option<String>,
    ) -> Result<Option<User>, StoreError> {
        if let Some(who) = &who
            && who.subject != due.subject
        {
            return Err(StoreError::Rejected(format!(
                "the provider described another subject than the session's ({})",
                who.subject
            )));
        }
        let stored_token = match refresh_token {
            Some(token) => self.seal(Purpose::RefreshToken, &due.id, &token)?,
            None => due.stored_token.clone(),
        };
        let now = now_millis();
        let still = {
            let _turn = self.write_turn().await;
            session::Entity::update_many()
                .col_expr(session::Column::RefreshToken, Expr::value(stored_token))
                .col_expr(session::Column::CheckedAt, Expr::value(now))
                .filter(session::Column::Id.eq(due.id.clone()))
                .filter(session::Column::RefreshToken.eq(due.stored_token.clone()))
                .filter(session::Column::RevokedAt.is_null())
                .filter(session::Column::ExpiresAt.gt(now))
                .exec(self.connection())
                .await?
                .rows_affected
                == 1
        };
        match who {
            Some(who) if still => self.record_identity(who, false).await.map(Some),
            _ => Ok(None),
        }
    }

    /// The provider refused a session's refresh token: the person was
    /// removed or disabled there, or their session there ended. The session
    /// ends (unless another check moved it on to a new token meanwhile).
    /// Their rights stay as last read: sessions that still check well keep
    /// them current, and *End sessions* removes someone at once.
    pub async fn session_refused(&self, due: &DueSession) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let ended = session::Entity::update_many()
            .col_expr(session::Column::RevokedAt, Expr::value(now_millis()))
            .col_expr(session::Column::RefreshToken, no_token())
            .filter(session::Column::Id.eq(due.id.clone()))
            .filter(session::Column::RefreshToken.eq(due.stored_token.clone()))
            .filter(session::Column::RevokedAt.is_null())
            .exec(self.connection())
            .await?;
        Ok(ended.rows_affected == 1)
    }

    /// Every team, by name.
    pub async fn teams(&self) -> Result<Vec<Team>, StoreError> {
        Ok(team::Entity::find()
            .order_by_asc(team::Column::Name)
            .all(self.connection())
            .await?
            .into_iter()
            .map(team_from_model)
            .collect())
    }

    /// Every account, by username, with its teams, live sessions and live
    /// personal tokens (for admins).
    pub async fn users(&self) -> Result<Vec<UserSummary>, StoreError> {
        let now = now_millis();
        let users = user::Entity::find()
            .order_by_asc(user::Column::Username)
            .all(self.connection())
            .await?;
        let teams: std::collections::HashMap<i64, String> = team::Entity::find()
            .all(self.connection())
            .await?
            .into_iter()
            .map(|t| (t.id, t.name))
            .collect();
        let mut memberships: std::collections::HashMap<i64, Vec<Team>> = Default::default();
        for m in membership::Entity::find().all(self.connection()).await? {
            if let Some(name) = teams.get(&m.team_id) {
                memberships.entry(m.user_id).or_default().push(Team {
                    id: m.team_id,
                    name: name.clone(),
                });
            }
        }
        let mut live: std::collections::HashMap<i64, u64> = Default::default();
        for s in session::Entity::find()
            .filter(session::Column::RevokedAt.is_null())
            .filter(session::Column::ExpiresAt.gt(now))
            .all(self.connection())
            .await?
        {
            *live.entry(s.user_id).or_default() += 1;
        }
        let mut tokens: std::collections::HashMap<i64, u64> = Default::default();
        for t in api_token::Entity::find()
            .filter(api_token::Column::RevokedAt.is_null())
            .filter(api_token::Column::RunId.is_null())
            .filter(api_token::Column::Node.is_null())
            .all(self.connection())
            .await?
        {
            if t.expires_at.is_none_or(|at| at > now) {
                *tokens.entry(t.user_id).or_default() += 1;
            }
        }
        Ok(users
            .into_iter()
            .map(|m| {
                let mut teams = memberships.remove(&m.id).unwrap_or_default();
                teams.sort_by(|a, b| a.name.cmp(&b.name));
                UserSummary {
                    live_sessions: live.get(&m.id).copied().unwrap_or(0),
                    live_tokens: tokens.get(&m.id).copied().unwrap_or(0),
                    last_login_at: m.last_login_at,
                    user: User {
                        id: m.id,
                        username: m.username,
                        display_name: m.display_name,
                        email: m.email,
                        is_admin: m.is_admin,
                        teams,
                    },
                }
            })
            .collect())
    }

    /// Signs a user out everywhere (an admin's revocation): ends their
    /// sessions and revokes their personal tokens. Returns the sessions
    /// ended.
    pub async fn end_sessions_of(&self, user_id: i64) -> Result<u64, StoreError> {
        let now = now_millis();
        let _turn = self.write_turn().await;
        api_token::Entity::update_many()
            .col_expr(api_token::Column::RevokedAt, Expr::value(now))
            .filter(api_token::Column::UserId.eq(user_id))
            .filter(api_token::Column::RunId.is_null())
            .filter(api_token::Column::Node.is_null())
            .filter(api_token::Column::RevokedAt.is_null())
            .exec(self.connection())
            .await?;
        let result = session::Entity::update_many()
            .col_expr(session::Column::RevokedAt, Expr::value(now))
            .col_expr(session::Column::RefreshToken, no_token())
            .filter(session::Column::UserId.eq(user_id))
            .filter(session::Column::RevokedAt.is_null())
            .filter(session::Column::ExpiresAt.gt(now))
            .exec(self.connection())
            .await?;
        Ok(result.rows_affected)
    }

    /// Keeps a sign-in's secrets until the provider sends the browser back.
    /// Attempts older than [`LOGIN_MAX_AGE`] are cleared on the way.
    pub async fn begin_login(&self, attempt: LoginAttempt) -> Result<(), StoreError> {
        let now = now_millis();
        let _turn = self.write_turn().await;
        login_attempt::Entity::delete_many()
            .filter(login_attempt::Column::CreatedAt.lt(now - LOGIN_MAX_AGE.as_millis() as i64))
            .exec(self.connection())
            .await?;
        login_attempt::ActiveModel {
            state: Set(attempt.state),
            nonce: Set(attempt.nonce),
            browser: Set(attempt.browser),
            pkce_verifier: Set(attempt.pkce_verifier),
            return_to: Set(attempt.return_to),
            created_at: Set(now),
        }
        .insert(self.connection())
        .await?;
        Ok(())
    }

    /// Takes a sign-in in progress by its state, once: a second call with
    /// the same state, an unknown state or an old one gets None.
    pub async fn take_login(&self, state: &str) -> Result<Option<LoginAttempt>, StoreError> {
        let _turn = self.write_turn().await;
        let tx = self.begin_write().await?;
        let Some(found) = login_attempt::Entity::find_by_id(state.to_owned())
            .one(&tx)
            .await?
        else {
            return Ok(None);
        };
        let deleted = login_attempt::Entity::delete_by_id(state.to_owned())
            .exec(&tx)
            .await?;
        tx.commit().await?;
        let fresh = now_millis() - found.created_at <= LOGIN_MAX_AGE.as_millis() as i64;
        Ok(
            (deleted.rows_affected == 1 && fresh).then_some(LoginAttempt {
                state: found.state,
                nonce: found.nonce,
                browser: found.browser,
                pkce_verifier: found.pkce_verifier,
                return_to: found.return_to,
            }),
        )
    }

    async fn insert_token(
        &self,
        user_id: i64,
        name: String,
        run_id: Option<String>,
        expires_at: Option<i64>,
        created_at: i64,
    ) -> Result<(api_token::Model, String), StoreError> {
        let (model, secret) = new_token(user_id, name, run_id, None, expires_at, created_at);
        let _turn = self.write_turn().await;
        let model = model.insert(self.connection()).await?;
        Ok((model, secret))
    }

    /// A personal token as a person asked for it: the request checked, and
    /// at most [`MAX_TOKENS_PER_USER`] live ones each.
    pub async fn create_personal_token(
        &self,
        user_id: i64,
        request: &TokenRequest,
    ) -> Result<NewApiToken, StoreError> {
        if let Err(mut fields) = request.check() {
            return Err(StoreError::Invalid(fields.remove(0)));
        }
        if self.api_tokens(user_id).await?.len() >= MAX_TOKENS_PER_USER {
            return Err(StoreError::Rejected(format!(
                "you hold {MAX_TOKENS_PER_USER} tokens, the most one person may; revoke one you no longer use"
            )));
        }
        let days = request.expires_in_days.unwrap_or(DEFAULT_TOKEN_DAYS);
        // The lifetime runs from the token's own creation time, so it lasts
        // exactly the days asked for.
        let now = now_millis();
        let expires_at = now + i64::from(days) * 86_400_000;
        let (model, secret) = self
            .insert_token(
                user_id,
                request.name.trim().to_owned(),
                None,
                Some(expires_at),
                now,
            )
            .await?;
        Ok(NewApiToken {
            token: token_from_model(model),
            secret,
        })
    }

    /// A personal API token; its secret is in the answer and nowhere else.
    pub async fn create_api_token(
        &self,
        user_id: i64,
        name: &str,
        expires_at: Option<i64>,
    ) -> Result<NewApiToken, StoreError> {
        let (model, secret) = self
            .insert_token(user_id, name.to_owned(), None, expires_at, now_millis())
            .await?;
        Ok(NewApiToken {
            token: token_from_model(model),
            secret,
        })
    }

    /// A token that writes to one run only, for the job producing it; it
    /// stops working when [`Store::revoke_run_tokens`] is called at the
    /// job's end.
    pub async fn create_run_token(&self, user_id: i64, run_id: &str) -> Result<String, StoreError> {
        let mut secrets = self
            .create_run_tokens(&[(user_id, run_id.to_owned())])
            .await?;
        Ok(secrets.remove(0))
    }

    /// [`Store::create_run_token`] for many runs in one transaction (a
    /// cycle's starts): (user, run) → the token, in the order given.
    pub async fn create_run_tokens(
        &self,
        runs: &[(i64, String)],
    ) -> Result<Vec<String>, StoreError> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let mut secrets = Vec::with_capacity(runs.len());
        for (user_id, run_id) in runs {
            let (model, secret) = new_token(
                *user_id,
                format!("job run {run_id}"),
                Some(run_id.clone()),
                None,
                None,
                now_millis(),
            );
            model.insert(&txn).await?;
            secrets.push(secret);
        }
        txn.commit().await?;
        Ok(secrets)
    }

    pub async fn revoke_run_tokens(&self, run_id: &str) -> Result<u64, StoreError> {
        let _turn = self.write_turn().await;
        let result = api_token::Entity::update_many()
            .col_expr(api_token::Column::RevokedAt, Expr::value(now_millis()))
            .filter(api_token::Column::RunId.eq(run_id))
            .filter(api_token::Column::RevokedAt.is_null())
            .exec(self.connection())
            .await?;
        Ok(result.rows_affected)
    }

    /// The user a token belongs to, if it is live: known, not revoked, not
    /// expired. Records when it was last used.
    pub async fn token_user(&self, secret: &str) -> Result<Option<TokenUser>, StoreError> {
        let Some(found) = api_token::Entity::find()
            .filter(api_token::Column::TokenHash.eq(secret_hash(secret)))
            .one(self.connection())
            .await?
        else {
            return Ok(None);
        };
        let now = now_millis();
        if found.revoked_at.is_some() || found.expires_at.is_some_and(|at| at <= now) {
            return Ok(None);
        }
        let Some((user, local)) = self.user_and_origin(found.user_id).await? else {
            return Ok(None);
        };
        if found
            .last_used_at
            .is_none_or(|at| now - at > TOUCH_EVERY_MS)
        {
            let _turn = self.write_turn().await;
            api_token::Entity::update_many()
                .col_expr(api_token::Column::LastUsedAt, Expr::value(now))
                .filter(api_token::Column::Id.eq(found.id))
                .exec(self.connection())
                .await?;
        }
        Ok(Some(TokenUser {
            user,
            local,
            token_id: found.id,
            run_id: found.run_id,
            node: found.node,
        }))
    }

    /// A user's live personal tokens, newest first.
    pub async fn api_tokens(&self, user_id: i64) -> Result<Vec<ApiToken>, StoreError> {
        let now = now_millis();
        Ok(api_token::Entity::find()
            .filter(api_token::Column::UserId.eq(user_id))
            .filter(api_token::Column::RunId.is_null())
            .filter(api_token::Column::Node.is_null())
            .filter(api_token::Column::RevokedAt.is_null())
            .order_by_desc(api_token::Column::Id)
            .all(self.connection())
            .await?
            .into_iter()
            .filter(|t| t.expires_at.is_none_or(|at| at > now))
            .map(token_from_model)
            .collect())
    }

    /// A node's agent token (made by an admin, `user_id`): it writes that
    /// node's GPU samples and nothing else. Its secret is in the answer and
    /// nowhere else. At most [`MAX_TOKENS_PER_NODE`] live ones per node, so
    /// that one can be rotated in while another still serves.
    /// `expires_in_days` in `request`: none, until it is revoked.
    pub async fn create_node_token(
        &self,
        user_id: i64,
        node: &str,
        request: &trainyard_domain::identity::NodeTokenRequest,
    ) -> Result<NewApiToken, StoreError> {
        if let Err(e) = trainyard_domain::telemetry::check_node_name(node) {
            return Err(StoreError::Invalid(e));
        }
        if let Err(e) = request.check() {
            return Err(StoreError::Invalid(e));
        }
        // Counted and made in one turn, so that two at once cannot pass
        // the limit together.
        let _turn = self.write_turn().await;
        if self.node_tokens(node).await?.len() >= MAX_TOKENS_PER_NODE {
            return Err(StoreError::Rejected(format!(
                "node {node} holds {MAX_TOKENS_PER_NODE} tokens, the most a node may; revoke one its agent no longer uses"
            )));
        }
        let now = now_millis();
        let expires_at = request
            .expires_in_days
            .map(|days| now + i64::from(days) * 86_400_000);
        let (model, secret) = new_token(
            user_id,
            format!("agent of node {node}"),
            None,
            Some(node.to_owned()),
            expires_at,
            now,
        );
        let model = model.insert(self.connection()).await?;
        Ok(NewApiToken {
            token: token_from_model(model),
            secret,
        })
    }

    /// A node's live agent tokens (neither revoked nor expired), newest
    /// first.
    pub async fn node_tokens(&self, node: &str) -> Result<Vec<ApiToken>, StoreError> {
        let now = now_millis();
        Ok(api_token::Entity::find()
            .filter(api_token::Column::Node.eq(node))
            .filter(api_token::Column::RevokedAt.is_null())
            .order_by_desc(api_token::Column::Id)
            .all(self.connection())
            .await?
            .into_iter()
            .filter(|t| t.expires_at.is_none_or(|at| at > now))
            .map(token_from_model)
            .collect())
    }

    /// Every node's live agent tokens, by node and newest first: at most
    /// `limit`.
    pub async fn all_node_tokens(&self, limit: u64) -> Result<Vec<(String, ApiToken)>, StoreError> {
        let now = now_millis();
        Ok(api_token::Entity::find()
            .filter(api_token::Column::Node.is_not_null())
            .filter(api_token::Column::RevokedAt.is_null())
            .filter(
                Condition::any()
                    .add(api_token::Column::ExpiresAt.is_null())
                    .add(api_token::Column::ExpiresAt.gt(now)),
            )
            .order_by_asc(api_token::Column::Node)
            .order_by_desc(api_token::Column::Id)
            .limit(limit)
            .all(self.connection())
            .await?
            .into_iter()
            .filter_map(|t| Some((t.node.clone()?, token_from_model(t))))
            .collect())
    }

    /// Revokes one of a node's agent tokens; false if it is not the
    /// node's or already revoked.
    pub async fn revoke_node_token(&self, node: &str, id: i64) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let result = api_token::Entity::update_many()
            .col_expr(api_token::Column::RevokedAt, Expr::value(now_millis()))
            .filter(api_token::Column::Id.eq(id))
            .filter(api_token::Column::Node.eq(node))
            .filter(api_token::Column::RevokedAt.is_null())
            .exec(self.connection())
            .await?;
        Ok(result.rows_affected == 1)
    }

    /// Revokes one of a user's personal tokens; false if it is not theirs
    /// or already revoked.
    pub async fn revoke_api_token(&self, user_id: i64, id: i64) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let result = api_token::Entity::update_many()
            .col_expr(api_token::Column::RevokedAt, Expr::value(now_millis()))
            .filter(api_token::Column::Id.eq(id))
            .filter(api_token::Column::UserId.eq(user_id))
            .filter(api_token::Column::RunId.is_null())
            .filter(api_token::Column::Node.is_null())
            .filter(api_token::Column::RevokedAt.is_null())
            .exec(self.connection())
            .await?;
        Ok(result.rows_affected == 1)
    }
}

impl Store {
    /// Whose a run is: its creator, and the team it is filed under.
    pub async fn run_owner(&self, run_id: &str) -> Result<Owner, StoreError> {
        let run = crate::entity::run::Entity::find_by_id(run_id.to_owned())
            .one(self.connection())
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("Run with id={run_id} not found")))?;
        Ok(Owner::new(run.user_id, run.team_id))
    }

    /// The (experiment, run) of every run a user owns, deleted ones too
    /// (their artifacts stay on disk): where their artifacts are.
    pub async fn runs_owned_by(&self, user_id: i64) -> Result<Vec<(i64, String)>, StoreError> {
        use crate::entity::run;
        Ok(run::Entity::find()
            .select_only()
            .column(run::Column::ExperimentId)
            .column(run::Column::Id)
            .filter(run::Column::UserId.eq(user_id))
            .into_tuple()
            .all(self.connection())
            .await?)
    }

    /// May the user see (Read) or change (Change) the run? One they may not
    /// see does not exist for them; one they may see but not change is
    /// Forbidden.
    pub async fn run_as(
        &self,
        user: &User,
        run_id: &str,
        access: crate::Access,
    ) -> Result<(), StoreError> {
        if user.is_admin {
            return Ok(());
        }
        let owner = self.run_owner(run_id).await?;
        if !user.can_read(owner) {
            return Err(StoreError::NotFound(format!(
                "Run with id={run_id} not found"
            )));
        }
        if access == crate::Access::Change && !user.can_change(owner) {
            return Err(StoreError::Forbidden(format!(
                "run {run_id} is not yours: only its owner or an admin may change it"
            )));
        }
        Ok(())
    }
}

impl Store {
    /// Checks that the user may see every one of the runs (one query); the
    /// first they may not see is reported as not found.
    pub async fn runs_readable(&self, user: &User, run_ids: &[String]) -> Result<(), StoreError> {
        if user.is_admin || run_ids.is_empty() {
            return Ok(());
        }
        let mut sql = self.sql();
        sql.push("SELECT r.id FROM runs r WHERE r.id IN ")
            .bind_list(run_ids.iter().cloned());
        crate::Viewer::of(user).restrict(&mut sql, "r.user_id", "r.team_id", None);
        let rows = sea_orm::ConnectionTrait::query_all_raw(self.connection(), sql.build()).await?;
        let seen: std::collections::HashSet<String> = rows
            .iter()
            .filter_map(|row| row.try_get::<String>("", "id").ok())
            .collect();
        match run_ids.iter().find(|id| !seen.contains(*id)) {
            Some(missing) => Err(StoreError::NotFound(format!(
                "Run with id={missing} not found"
            ))),
            None => Ok(()),
        }
    }
}

fn token_from_model(m: api_token::Model) -> ApiToken {
    ApiToken {
        id: m.id,
        name: m.name,
        prefix: m.prefix,
        created_at: m.created_at,
        last_used_at: m.last_used_at,
        expires_at: m.expires_at,
    }
}

/// A new token's row and its secret (only its hash is stored).
fn team_from_model(t: team::Model) -> Team {
    Team {
        id: t.id,
        name: t.name,
    }
}

fn new_token(
    user_id: i64,
    name: String,
    run_id: Option<String>,
    node: Option<String>,
    expires_at: Option<i64>,
    created_at: i64,
) -> (api_token::ActiveModel, String) {
    let secret = format!("{TOKEN_PREFIX}{}", random_secret());
    let model = api_token::ActiveModel {
        user_id: Set(user_id),
        name: Set(name),
        token_hash: Set(secret_hash(&secret)),
        prefix: Set(secret.chars().take(10).collect()),
        run_id: Set(run_id),
        node: Set(node),
        created_at: Set(created_at),
        last_used_at: Set(None),
        expires_at: Set(expires_at),
        revoked_at: Set(None),
        ..Default::default()
    };
    (model, secret)
}
