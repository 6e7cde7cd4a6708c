//! The template catalog: the templates shipped as files are synced in at
//! start-up (marked builtin); jobs read a template's spec from here.

use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, Set};
use trainyard_domain::template::{Template, TemplateSpec};

use crate::entity::template;
use crate::{Store, StoreError, now_millis};

fn from_model(m: template::Model) -> Result<Template, StoreError> {
    let spec: TemplateSpec = serde_json::from_str(&m.spec).map_err(|e| {
        StoreError::Rejected(format!("template `{}` has an unreadable spec: {e}", m.slug))
    })?;
    Ok(Template {
        slug: m.slug,
        builtin: m.builtin,
        spec,
    })
}

impl Store {
    /// Makes the builtin templates exactly `templates`: new ones are added,
    /// changed ones updated, builtin ones no longer shipped removed. Returns
    /// how many were added or changed.
    pub async fn sync_builtin_templates(
        &self,
        templates: &[(String, TemplateSpec)],
    ) -> Result<usize, StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let existing = template::Entity::find().all(&txn).await?;
        let now = now_millis();
        let mut changed = 0;
        for (slug, spec) in templates {
            let json = serde_json::to_string(spec)
                .map_err(|e| StoreError::Rejected(format!("template `{slug}`: {e}")))?;
            match existing.iter().find(|m| &m.slug == slug) {
                Some(m) if m.spec == json && m.builtin => {}
                Some(m) => {
                    let mut active: template::ActiveModel = m.clone().into();
                    active.title = Set(spec.title.clone());
                    active.description = Set(spec.description.clone());
                    active.spec = Set(json);
                    active.builtin = Set(true);
                    active.updated_at = Set(now);
                    active.update(&txn).await?;
                    changed += 1;
                }
                None => {
                    template::ActiveModel {
                        slug: Set(slug.clone()),
                        title: Set(spec.title.clone()),
                        description: Set(spec.description.clone()),
                        spec: Set(json),
                        builtin: Set(true),
                        created_at: Set(now),
                        updated_at: Set(now),
                        ..Default::default()
                    }
                    .insert(&txn)
                    .await?;
                    changed += 1;
                }
            }
        }
        let gone: Vec<i64> = existing
            .iter()
            .filter(|m| m.builtin && !templates.iter().any(|(slug, _)| slug == &m.slug))
            .map(|m| m.id)
            .collect();
        if !gone.is_empty() {
            template::Entity::delete_many()
                .filter(template::Column::Id.is_in(gone))
                .exec(&txn)
                .await?;
        }
        txn.commit().await?;
        Ok(changed)
    }

    /// Creates or replaces a template made by an admin. Shipped templates
    /// are changed in their files, not here.
    pub async fn save_template(
        &self,
        slug: &str,
        spec: &TemplateSpec,
    ) -> Result<Template, StoreError> {
        let _turn = self.write_turn().await;
        let json = serde_json::to_string(spec)
            .map_err(|e| StoreError::Rejected(format!("template `{slug}`: {e}")))?;
        let now = now_millis();
        let existing = template::Entity::find()
            .filter(template::Column::Slug.eq(slug))
            .one(self.connection())
            .await?;
        let saved = match existing {
            Some(m) if m.builtin => {
                return Err(StoreError::Rejected(format!(
                    "`{slug}` is shipped with Trainyard; change templates/{slug}/template.yaml, or save this one under another name"
                )));
            }
            Some(m) => {
                let mut active: template::ActiveModel = m.into();
                active.title = Set(spec.title.clone());
                active.description = Set(spec.description.clone());
                active.spec = Set(json);
                active.updated_at = Set(now);
                active.update(self.connection()).await?
            }
            None => {
                template::ActiveModel {
                    slug: Set(slug.to_owned()),
                    title: Set(spec.title.clone()),
                    description: Set(spec.description.clone()),
                    spec: Set(json),
                    builtin: Set(false),
                    created_at: Set(now),
                    updated_at: Set(now),
                    ..Default::default()
                }
                .insert(self.connection())
                .await?
            }
        };
        from_model(saved)
    }

    /// Removes a template made by an admin; jobs made from it keep their
    /// spec and files.
    pub async fn delete_template(&self, slug: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        match template::Entity::find()
            .filter(template::Column::Slug.eq(slug))
            .one(self.connection())
            .await?
        {
            None => Err(StoreError::NotFound(format!(
                "there is no template `{slug}` in the catalog"
            ))),
            Some(m) if m.builtin => Err(StoreError::Rejected(format!(
                "`{slug}` is shipped with Trainyard; remove templates/{slug} instead"
            ))),
            Some(m) => {
                template::Entity::delete_by_id(m.id)
                    .exec(self.connection())
                    .await?;
                Ok(())
            }
        }
    }

    pub async fn get_template(&self, slug: &str) -> Result<Option<Template>, StoreError> {
        template::Entity::find()
            .filter(template::Column::Slug.eq(slug))
            .one(self.connection())
            .await?
            .map(from_model)
            .transpose()
    }

    /// The whole catalog, by title.
    pub async fn templates(&self) -> Result<Vec<Template>, StoreError> {
        template::Entity::find()
            .order_by_asc(template::Column::Title)
            .all(self.connection())
            .await?
            .into_iter()
            .map(from_model)
            .collect()
    }
}
