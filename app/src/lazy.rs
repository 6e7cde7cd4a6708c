//! Pages that most visits never open, loaded on demand: their code is cut
//! out of the first download into chunks of their own (`cargo leptos build
//! --split`) and fetched when the route is entered. The server renders
//! them whole as before, and names their chunks in the page so the browser
//! fetches them beside the main bundle when a visit starts on one.
//!
//! Each is a `LazyRoute` without route data of its own: the page's
//! resources start in its component, as on every other page.

use leptos::prelude::*;
use leptos_router::{LazyRoute, lazy_route};

use crate::{account, explorer, gpus, jobs, pages, usage};

/// Compare is opened from an experiment's table, a click after the first
/// load: its parallel coordinates, scatter and figures wait until then.
pub struct CompareRoute;

#[lazy_route]
impl LazyRoute for CompareRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <explorer::ComparePage/> }.into_any()
    }
}

pub struct SubmitRoute;

#[lazy_route]
impl LazyRoute for SubmitRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <jobs::SubmitPage/> }.into_any()
    }
}

pub struct TemplateEditorRoute;

#[lazy_route]
impl LazyRoute for TemplateEditorRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <jobs::TemplateEditor/> }.into_any()
    }
}

pub struct TemplatesRoute;

#[lazy_route]
impl LazyRoute for TemplatesRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <pages::TemplatesPage/> }.into_any()
    }
}

pub struct UsageRoute;

#[lazy_route]
impl LazyRoute for UsageRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <usage::UsagePage/> }.into_any()
    }
}

pub struct AdminRoute;

#[lazy_route]
impl LazyRoute for AdminRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <pages::AdminPage/> }.into_any()
    }
}

pub struct GpusRoute;

#[lazy_route]
impl LazyRoute for GpusRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <gpus::GpusPage/> }.into_any()
    }
}

pub struct NodeGpusRoute;

#[lazy_route]
impl LazyRoute for NodeGpusRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <gpus::NodeGpusPage/> }.into_any()
    }
}

pub struct TokensRoute;

#[lazy_route]
impl LazyRoute for TokensRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <account::TokensPage/> }.into_any()
    }
}

/// The registry and an experiment's logged models.
pub struct ModelsRoute;

#[lazy_route]
impl LazyRoute for ModelsRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <explorer::models::ModelsPage/> }.into_any()
    }
}

pub struct TracesRoute;

#[lazy_route]
impl LazyRoute for TracesRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <explorer::models::TracesPage/> }.into_any()
    }
}

pub struct DatasetsRoute;

#[lazy_route]
impl LazyRoute for DatasetsRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <explorer::datasets::DatasetsPage/> }.into_any()
    }
}

pub struct DatasetRoute;

#[lazy_route]
impl LazyRoute for DatasetRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <explorer::datasets::DatasetPage/> }.into_any()
    }
}

pub struct ScorersRoute;

#[lazy_route]
impl LazyRoute for ScorersRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <explorer::scorers::ScorersPage/> }.into_any()
    }
}

pub struct TraceRoute;

#[lazy_route]
impl LazyRoute for TraceRoute {
    fn data() -> Self {
        Self
    }
    fn view(_this: Self) -> AnyView {
        view! { <explorer::models::TracePage/> }.into_any()
    }
}
