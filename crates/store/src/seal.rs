//! Secrets the server has to read back, sealed at rest: webhooks' signing
//! secrets and the provider's refresh tokens. A dump or backup of the
//! database alone does not give them away.
//!
//! Each value is sealed with AES-256-GCM under the server's key (setting
//! `secrets_key`), with a fresh random nonce, and bound to what it is and
//! whose it is (purpose and row id are the associated data), so a sealed
//! value moved into another column or row does not open. Stored as
//! `sealed.v1.` and the base64 of nonce, ciphertext and tag. A value stored
//! before sealing began has no prefix: it is read as it is, and
//! [`Store::seal_plain_secrets`] seals it at start.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};

use sea_orm::ConnectionTrait;

use crate::tracking::get;
use crate::{Store, StoreError, now_millis};

const PREFIX: &str = "sealed.v1.";

/// What a sealed value is, bound into its seal.
#[derive(Debug, Clone, Copy)]
pub enum Purpose {
    WebhookSecret,
    RefreshToken,
}

impl Purpose {
    /// What a value of this purpose, held by row `owner`, is bound to.
    fn aad(self, owner: &str) -> Aad<Vec<u8>> {
        Aad::from(format!("trainyard {}\0{owner}", self.name()).into_bytes())
    }

    fn name(self) -> &'static str {
        match self {
            Purpose::WebhookSecret => "webhook secret",
            Purpose::RefreshToken => "refresh token",
        }
    }
}

/// The server's key for secrets at rest.
pub struct SealingKey(LessSafeKey);

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealingKey(…)")
    }
}

impl SealingKey {
    pub fn from_bytes(bytes: &[u8; 32]) -> SealingKey {
        SealingKey(LessSafeKey::new(
            UnboundKey::new(&AES_256_GCM, bytes).expect("a 32-byte key is an AES-256 key"),
        ))
    }

    /// A new random key, as its text.
    pub fn generate() -> String {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).expect("the operating system's random source failed");
        hex::encode(bytes)
    }

    /// A key as written: 64 hexadecimal digits, or the base64 of 32 bytes
    /// (what `openssl rand -base64 32` or Helm's `randBytes 32` give).
    pub fn parse(text: &str) -> Result<SealingKey, String> {
        let text = text.trim();
        let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            hex::decode(text).expect("checked hex")
        } else {
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| "is neither 64 hexadecimal digits nor base64".to_owned())?
        };
        let bytes: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
            format!(
                "is {} bytes long; a key is 32 bytes (make one with `openssl rand -hex 32`)",
                b.len()
            )
        })?;
        Ok(SealingKey::from_bytes(&bytes))
    }

    /// `plain` sealed for row `owner` (a webhook's or session's id).
    pub fn seal(&self, purpose: Purpose, owner: &str, plain: &str) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).expect("the operating system's random source failed");
        let mut data = plain.as_bytes().to_vec();
        self.0
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                purpose.aad(owner),
                &mut data,
            )
            .expect("AES-GCM seals any value shorter than 64 GiB");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        format!("{PREFIX}{}", STANDARD_NO_PAD.encode(out))
    }

    /// The value of what `seal` stored, or the stored text itself when it
    /// was stored before sealing began.
    pub fn open(&self, purpose: Purpose, owner: &str, stored: &str) -> Result<String, StoreError> {
        let Some(sealed) = stored.strip_prefix(PREFIX) else {
            return Ok(stored.to_owned());
        };
        let unreadable = || {
            StoreError::Sealed(format!(
                "a stored {} cannot be opened with this server's secrets_key: \
                 was the key changed or lost? Give the server the key it had, or set the secret again",
                purpose.name()
            ))
        };
        let bytes = STANDARD_NO_PAD.decode(sealed).map_err(|_| unreadable())?;
        if bytes.len() < NONCE_LEN {
            return Err(unreadable());
        }
        let (nonce, data) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| unreadable())?;
        let mut data = data.to_vec();
        let plain = self
            .0
            .open_in_place(nonce, purpose.aad(owner), &mut data)
            .map_err(|_| unreadable())?;
        String::from_utf8(plain.to_vec()).map_err(|_| unreadable())
    }
}

impl Store {
    /// Seals secrets from now on with `key`. A store without a key refuses
    /// to keep or read a secret rather than keep it in the clear.
    pub fn with_sealing_key(mut self, key: SealingKey) -> Store {
        self.sealing = Some(std::sync::Arc::new(key));
        self
    }

    /// While rotating: what `previous` sealed opens too, and
    /// [`Store::reseal_with_current_key`] seals it again with the key.
    pub fn with_previous_sealing_key(mut self, previous: SealingKey) -> Store {
        self.sealing_previous = Some(std::sync::Arc::new(previous));
        self
    }

    fn sealing_key(&self) -> Result<&SealingKey, StoreError> {
        self.sealing.as_deref().ok_or_else(|| {
            StoreError::Sealed("this store was opened without a key to seal secrets with".into())
        })
    }

    pub(crate) fn seal(
        &self,
        purpose: Purpose,
        owner: &str,
        plain: &str,
    ) -> Result<String, StoreError> {
        Ok(self.sealing_key()?.seal(purpose, owner, plain))
    }

    pub(crate) fn open_sealed(
        &self,
        purpose: Purpose,
        owner: &str,
        stored: &str,
    ) -> Result<String, StoreError> {
        let opened = self.sealing_key()?.open(purpose, owner, stored);
        match (&opened, &self.sealing_previous) {
            (Err(_), Some(previous)) => previous.open(purpose, owner, stored).or(opened),
            _ => opened,
        }
    }

    /// While rotating: seals again with the key what only the previous key
    /// opens; returns how many. A value is rewritten only if it is still
    /// the one read.
    pub async fn reseal_with_current_key(&self) -> Result<u64, StoreError> {
        let Some(previous) = self.sealing_previous.clone() else {
            return Ok(0);
        };
        let key = self.sealing_key()?;
        let mut resealed = 0;
        for (table, column, purpose) in SEALED {
            resealed += self
                .each_secret((table, column), true, |id, stored| {
                    let previous = previous.clone();
                    async move {
                        if key.open(purpose, &id, &stored).is_ok() {
                            return Ok(0);
                        }
                        let Ok(plain) = previous.open(purpose, &id, &stored) else {
                            return Ok(0);
                        };
                        let sealed = key.seal(purpose, &id, &plain);
                        self.replace_secret((table, column), &id, &stored, &sealed)
                            .await
                    }
                })
                .await?;
        }
        Ok(resealed)
    }

    /// Writes `new` in place of `old` in `table.column` of row `id`, only
    /// if `old` is still there; returns the rows changed (0 or 1).
    async fn replace_secret(
        &self,
        (table, column): (&str, &str),
        id: &str,
        old: &str,
        new: &str,
    ) -> Result<u64, StoreError> {
        let mut sql = self.sql();
        sql.push(&format!("UPDATE {table} SET {column} = "))
            .bind(new.to_owned())
            .push(" WHERE id = ")
            .bind(id.to_owned())
            .push(&format!(" AND {column} = "))
            .bind(old.to_owned());
        let _turn = self.write_turn().await;
        Ok(self
            .connection()
            .execute_raw(sql.build())
            .await?
            .rows_affected())
    }

    /// One page of the values kept in `table.column`, sealed or still in
    /// the clear, in id order after `after`: (id, stored value).
    async fn secret_rows(
        &self,
        (table, column): (&str, &str),
        sealed: bool,
        after: &str,
        limit: i64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut sql = self.sql();
        sql.push(&format!(
            "SELECT id, {column} AS value FROM {table} WHERE {column} IS NOT NULL AND {column} <> '' AND substr({column}, 1, {}) {} ",
            PREFIX.len(),
            if sealed { "=" } else { "<>" }
        ))
        .bind(PREFIX.to_owned())
        .push(" AND id > ")
        .bind(after.to_owned())
        .push(" ORDER BY id LIMIT ")
        .bind(limit);
        let rows = self.connection().query_all_raw(sql.build()).await?;
        rows.iter()
            .map(|row| Ok((get(row, "id")?, get(row, "value")?)))
            .collect()
    }

    /// Hands every value kept in `table.column`, sealed or in the clear,
    /// to `each`, a page at a time; returns the sum of what `each` counted
    /// and stops at its first error.
    async fn each_secret<F, Fut>(
        &self,
        place: (&str, &str),
        sealed: bool,
        each: F,
    ) -> Result<u64, StoreError>
    where
        F: Fn(String, String) -> Fut,
        Fut: std::future::Future<Output = Result<u64, StoreError>>,
    {
        const PAGE: i64 = 500;
        let (mut after, mut counted) = (String::new(), 0);
        loop {
            let rows = self.secret_rows(place, sealed, &after, PAGE).await?;
            let full = rows.len() as i64 == PAGE;
            if let Some((last, _)) = rows.last() {
                after = last.clone();
            }
            for (id, value) in rows {
                counted += each(id, value).await?;
            }
            if !full {
                return Ok(counted);
            }
        }
    }

    /// Seals what was stored in the clear before sealing began (webhooks'
    /// secrets, sessions' refresh tokens); returns how many were sealed.
    /// Run at start, after the migrations; a value is rewritten only if it
    /// is still the one read.
    pub async fn seal_plain_secrets(&self) -> Result<u64, StoreError> {
        let mut sealed = 0;
        for (table, column, purpose) in SEALED {
            sealed += self
                .each_secret((table, column), false, |id, plain| async move {
                    let sealed = self.seal(purpose, &id, &plain)?;
                    self.replace_secret((table, column), &id, &plain, &sealed)
                        .await
                })
                .await?;
        }
        Ok(sealed)
    }

    /// The sealed secrets this store's key opens and those it does not
    /// (up to `SAMPLE` of each kind): none opening while some are stored
    /// means the key is not the one that sealed them.
    pub async fn check_sealed_secrets(&self) -> Result<(u64, u64), StoreError> {
        const SAMPLE: i64 = 100;
        let (mut opened, mut failed) = (0, 0);
        for (table, column, purpose) in SEALED {
            for (id, stored) in self.secret_rows((table, column), true, "", SAMPLE).await? {
                match self.open_sealed(purpose, &id, &stored) {
                    Ok(_) => opened += 1,
                    Err(_) => failed += 1,
                }
            }
        }
        Ok((opened, failed))
    }

    /// After a lost key: drops every secret this key cannot open. Those
    /// webhooks lose their secret and are turned off (an admin gives them
    /// a new one and turns them on); those sessions end, and their people
    /// sign in again. Returns how many webhooks and sessions.
    pub async fn forget_unopened_secrets(&self) -> Result<(u64, u64), StoreError> {
        let mut dropped = [0u64; 2];
        for (n, (table, column, purpose)) in SEALED.into_iter().enumerate() {
            dropped[n] = self
                .each_secret((table, column), true, |id, stored| async move {
                    if self.open_sealed(purpose, &id, &stored).is_ok() {
                        return Ok(0);
                    }
                    let mut sql = self.sql();
                    sql.push(&format!("UPDATE {table} SET {column} = NULL"));
                    if let Purpose::RefreshToken = purpose {
                        sql.push(", revoked_at = ").bind(now_millis());
                    }
                    sql.push(" WHERE id = ")
                        .bind(id.clone())
                        .push(&format!(" AND {column} = "))
                        .bind(stored);
                    let done = {
                        let _turn = self.write_turn().await;
                        self.connection()
                            .execute_raw(sql.build())
                            .await?
                            .rows_affected()
                    };
                    if done > 0 && matches!(purpose, Purpose::WebhookSecret) {
                        // Off, as an admin turns it off: what waited fails.
                        let off = crate::webhooks::WebhookChange {
                            status: Some("DISABLED".to_owned()),
                            ..Default::default()
                        };
                        self.update_webhook(&id, off).await?;
                    }
                    Ok(done)
                })
                .await?;
        }
        Ok((dropped[0], dropped[1]))
    }
}

/// Where sealed secrets are kept: table, column, purpose.
const SEALED: [(&str, &str, Purpose); 2] = [
    ("webhooks", "secret", Purpose::WebhookSecret),
    ("sessions", "refresh_token", Purpose::RefreshToken),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SealingKey {
        SealingKey::parse(&SealingKey::generate()).unwrap()
    }

    #[test]
    fn a_sealed_value_opens_with_its_key_and_purpose_alone() {
        let key = key();
        let sealed = key.seal(Purpose::WebhookSecret, "w1", "s3cret");
        assert!(sealed.starts_with(PREFIX) && !sealed.contains("s3cret"));
        assert_ne!(
            sealed,
            key.seal(Purpose::WebhookSecret, "w1", "s3cret"),
            "each seal has its own nonce"
        );
        assert_eq!(
            key.open(Purpose::WebhookSecret, "w1", &sealed).unwrap(),
            "s3cret"
        );
        let other = key.open(Purpose::RefreshToken, "w1", &sealed).unwrap_err();
        assert!(
            key.open(Purpose::WebhookSecret, "w2", &sealed).is_err(),
            "another webhook's row does not open it"
        );
        assert!(
            other.to_string().contains("refresh token cannot be opened"),
            "{other}"
        );
        let lost = self::key()
            .open(Purpose::WebhookSecret, "w1", &sealed)
            .unwrap_err();
        assert!(lost.to_string().contains("secrets_key"), "{lost}");
        // A byte changed anywhere is found out.
        let mut bytes = STANDARD_NO_PAD.decode(&sealed[PREFIX.len()..]).unwrap();
        bytes[NONCE_LEN] ^= 1;
        let tampered = format!("{PREFIX}{}", STANDARD_NO_PAD.encode(&bytes));
        assert!(key.open(Purpose::WebhookSecret, "w1", &tampered).is_err());
        assert!(
            key.open(Purpose::WebhookSecret, "w1", "sealed.v1.AAAA")
                .is_err()
        );
        // What was stored before sealing began reads as it is.
        assert_eq!(
            key.open(Purpose::WebhookSecret, "w1", "plain").unwrap(),
            "plain"
        );
    }

    #[test]
    fn a_key_is_32_bytes_in_hex_or_base64() {
        let hex_key = SealingKey::generate();
        assert_eq!(hex_key.len(), 64);
        let sealed = SealingKey::parse(&hex_key)
            .unwrap()
            .seal(Purpose::RefreshToken, "s1", "t");
        let bytes: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&hex_key[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
        assert_eq!(
            SealingKey::parse(&format!(" {b64}\n"))
                .unwrap()
                .open(Purpose::RefreshToken, "s1", &sealed)
                .unwrap(),
            "t",
            "the same key, written in base64"
        );
        let short = SealingKey::parse(&"ab".repeat(16)).unwrap_err();
        assert!(
            short.contains("is 24 bytes long; a key is 32 bytes"),
            "{short}"
        );
        let junk = SealingKey::parse("not a key!").unwrap_err();
        assert!(
            junk.contains("neither 64 hexadecimal digits nor base64"),
            "{junk}"
        );
    }
}
