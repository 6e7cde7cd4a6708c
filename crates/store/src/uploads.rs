//! Uploads: what each unpacked project archive or dataset is, and whose.

use sea_orm::sea_query::{Alias, Expr, Func};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set,
};
use trainyard_domain::job::Upload;

use crate::entity::upload;
use crate::{Store, StoreError, now_millis};

/// An upload just unpacked.
#[derive(Debug, Clone)]
pub struct NewUpload {
    pub id: String,
    /// `project` or `dataset`.
    pub kind: String,
    pub name: String,
    pub owner_id: Option<i64>,
    pub files: u64,
    pub bytes: u64,
    /// Its files and folders, its own included.
    pub entries: u64,
}

/// What one person's uploads hold, unpacked: what counts against their
/// upload quotas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UploadUse {
    pub bytes: u64,
    pub entries: u64,
}

fn from_model(m: upload::Model) -> Upload {
    Upload {
        id: m.id,
        kind: m.kind,
        name: m.name,
        files: m.files.max(0) as u64,
        bytes: m.bytes.max(0) as u64,
        entries: m.entries.max(0) as u64,
        created_at: m.created_at,
    }
}

impl Store {
    /// Records an upload; a dataset whose name is taken is a conflict.
    pub async fn create_upload(&self, new: NewUpload) -> Result<Upload, StoreError> {
        let _turn = self.write_turn().await;
        let dataset = new.kind == "dataset";
        if dataset && self.dataset(&new.name).await?.is_some() {
            return Err(StoreError::Conflict {
                what: format!("a dataset named `{}`", new.name),
            });
        }
        let model = upload::ActiveModel {
            id: Set(new.id),
            kind: Set(new.kind),
            dataset_name: Set(dataset.then(|| new.name.clone())),
            name: Set(new.name),
            owner_id: Set(new.owner_id),
            files: Set(new.files as i64),
            bytes: Set(new.bytes as i64),
            created_at: Set(now_millis()),
            entries: Set(new.entries as i64),
            digest: Set(None),
        }
        .insert(self.connection())
        .await
        .map_err(|e| match e.sql_err() {
            Some(sea_orm::SqlErr::UniqueConstraintViolation(_)) => StoreError::Conflict {
                what: "a dataset with that name".to_owned(),
            },
            _ => e.into(),
        })?;
        Ok(from_model(model))
    }

    /// An uploaded project the user may use: their own (any, for admins).
    pub async fn project_for(
        &self,
        user: &trainyard_domain::identity::User,
        id: &str,
    ) -> Result<Option<Upload>, StoreError> {
        Ok(upload::Entity::find_by_id(id.to_owned())
            .filter(upload::Column::Kind.eq("project"))
            .one(self.connection())
            .await?
            .filter(|m| user.is_admin || m.owner_id == Some(user.id))
            .map(from_model))
    }

    /// Records the SHA-256 (hex) of the archive a project was unpacked
    /// from, once it is kept for good (within its owner's quota): the same
    /// archive sent again is this upload from then on, and not before, so
    /// that none is handed out that a quota refusal is about to remove.
    pub async fn set_upload_digest(&self, id: &str, digest: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        upload::Entity::update_many()
            .col_expr(upload::Column::Digest, Expr::value(digest))
            .filter(upload::Column::Id.eq(id))
            .filter(upload::Column::Kind.eq("project"))
            .exec(self.connection())
            .await?;
        Ok(())
    }

    /// The project its owner uploaded before from the same archive (its
    /// SHA-256), the newest if more than one.
    pub async fn project_by_digest(
        &self,
        owner_id: i64,
        digest: &str,
    ) -> Result<Option<Upload>, StoreError> {
        Ok(upload::Entity::find()
            .filter(upload::Column::OwnerId.eq(owner_id))
            .filter(upload::Column::Digest.eq(digest))
            .filter(upload::Column::Kind.eq("project"))
            .order_by_desc(upload::Column::CreatedAt)
            .one(self.connection())
            .await?
            .map(from_model))
    }

    pub async fn dataset(&self, name: &str) -> Result<Option<Upload>, StoreError> {
        Ok(upload::Entity::find()
            .filter(upload::Column::DatasetName.eq(name))
            .one(self.connection())
            .await?
            .map(from_model))
    }

    /// A user's uploads, newest first, with their owner.
    pub async fn uploads_of(&self, user_id: i64) -> Result<Vec<Upload>, StoreError> {
        Ok(upload::Entity::find()
            .filter(upload::Column::OwnerId.eq(user_id))
            .order_by_desc(upload::Column::CreatedAt)
            .all(self.connection())
            .await?
            .into_iter()
            .map(from_model)
            .collect())
    }

    /// What a user's uploads hold, unpacked, in bytes and in files and
    /// folders: what counts against their upload quotas.
    pub async fn upload_use_of(&self, user_id: i64) -> Result<UploadUse, StoreError> {
        // A sum of bigints is numeric on PostgreSQL: cast back.
        let sum = |column: upload::Column| {
            Expr::from(Func::cast_as(
                Func::sum(Expr::col(column)),
                Alias::new("BIGINT"),
            ))
        };
        let sums: Option<(Option<i64>, Option<i64>)> = upload::Entity::find()
            .select_only()
            .column_as(sum(upload::Column::Bytes), "bytes")
            .column_as(sum(upload::Column::Entries), "entries")
            .filter(upload::Column::OwnerId.eq(user_id))
            .into_tuple()
            .one(self.connection())
            .await?;
        let (bytes, entries) = sums.unwrap_or_default();
        let count = |n: Option<i64>| n.unwrap_or(0).max(0) as u64;
        Ok(UploadUse {
            bytes: count(bytes),
            entries: count(entries),
        })
    }

    /// An upload with its owner, whatever its kind.
    pub async fn upload_with_owner(
        &self,
        id: &str,
    ) -> Result<Option<(Upload, Option<i64>)>, StoreError> {
        Ok(upload::Entity::find_by_id(id.to_owned())
            .one(self.connection())
            .await?
            .map(|m| {
                let owner = m.owner_id;
                (from_model(m), owner)
            }))
    }

    /// Forgets an upload (its files are the caller's to remove).
    pub async fn delete_upload(&self, id: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        upload::Entity::delete_by_id(id.to_owned())
            .exec(self.connection())
            .await?;
        Ok(())
    }

    /// Every dataset, by name.
    pub async fn datasets(&self) -> Result<Vec<Upload>, StoreError> {
        Ok(upload::Entity::find()
            .filter(upload::Column::Kind.eq("dataset"))
            .order_by_asc(upload::Column::Name)
            .all(self.connection())
            .await?
            .into_iter()
            .map(from_model)
            .collect())
    }
}
