//! What the store's tests start from: a migrated store on a test database
//! (SQLite, or PostgreSQL with TEST_DATABASE_URL), and people signed in.

use trainyard_domain::identity::User;
use trainyard_test_db::TestDb;

use crate::seal::SealingKey;
use crate::{SignIn, Store};

/// A new random key to seal secrets with.
pub(crate) fn new_key() -> SealingKey {
    SealingKey::parse(&SealingKey::generate()).unwrap()
}

/// A migrated store; the database lives as long as the `TestDb`.
pub(crate) async fn store() -> (TestDb, Store) {
    let db = TestDb::new().await;
    let store = Store::connect(&db.url, 4)
        .await
        .unwrap()
        .with_sealing_key(new_key());
    store.migrate().await.unwrap();
    (db, store)
}

/// Someone signed in, in the given groups (teams).
pub(crate) async fn person(store: &Store, name: &str, groups: &[&str]) -> User {
    store
        .sign_in(SignIn {
            subject: format!("sub-{name}"),
            username: name.to_owned(),
            display_name: String::new(),
            email: None,
            is_admin: false,
            groups: groups.iter().map(|g| g.to_string()).collect(),
        })
        .await
        .unwrap()
}
