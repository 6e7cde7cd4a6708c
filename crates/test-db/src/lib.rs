//! A database of its own for each test: a temporary SQLite file, or a fresh
//! PostgreSQL database when `TEST_DATABASE_URL` names a server (`make test`
//! runs the database tests both ways). For the tests of every crate; a
//! dev-dependency only.

use std::sync::atomic::{AtomicU32, Ordering};

use sea_orm::{ConnectionTrait, Database};

/// Keeps the database alive for as long as the test holds it.
pub struct TestDb {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    pub async fn new() -> TestDb {
        match std::env::var("TEST_DATABASE_URL") {
            Ok(admin_url) if !admin_url.is_empty() => Self::postgres(&admin_url).await,
            _ => {
                let dir = tempfile::tempdir().expect("a temporary folder for the test database");
                let url = format!("sqlite://{}", dir.path().join("test.db").display());
                TestDb {
                    url,
                    _dir: Some(dir),
                }
            }
        }
    }

    async fn postgres(admin_url: &str) -> TestDb {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "ty_test_{}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis())
        );
        let admin = Database::connect(admin_url)
            .await
            .expect("TEST_DATABASE_URL must name a reachable PostgreSQL server");
        admin
            .execute_unprepared(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create the test database");
        admin.close().await.ok();
        let base = admin_url
            .rsplit_once('/')
            .map(|(base, _)| base)
            .expect("TEST_DATABASE_URL ends with /DATABASE");
        TestDb {
            url: format!("{base}/{name}"),
            _dir: None,
        }
    }

    pub fn is_postgres(&self) -> bool {
        self.url.starts_with("postgres")
    }
}
