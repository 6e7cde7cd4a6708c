//! The colour theme: follows the system unless the user picks light or dark;
//! the choice is kept in the browser's local storage.

use leptos::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Theme {
    System,
    Light,
    Dark,
}

impl Theme {
    fn next(self) -> Theme {
        match self {
            Theme::System => Theme::Light,
            Theme::Light => Theme::Dark,
            Theme::Dark => Theme::System,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Theme::System => "system",
            Theme::Light => "light",
            Theme::Dark => "dark",
        }
    }

    #[cfg(feature = "hydrate")]
    fn from_name(name: &str) -> Option<Theme> {
        [Theme::System, Theme::Light, Theme::Dark]
            .into_iter()
            .find(|t| t.name() == name)
    }
}

#[cfg(feature = "hydrate")]
const STORAGE_KEY: &str = "trainyard-theme";

#[cfg(feature = "hydrate")]
fn saved_theme() -> Option<Theme> {
    let storage = window().local_storage().ok()??;
    Theme::from_name(&storage.get_item(STORAGE_KEY).ok()??)
}

#[cfg(feature = "hydrate")]
fn apply(theme: Theme) {
    if let Some(root) = document().document_element() {
        let _ = match theme {
            Theme::System => root.remove_attribute("data-theme"),
            other => root.set_attribute("data-theme", other.name()),
        };
    }
    if let Ok(Some(storage)) = window().local_storage() {
        let _ = storage.set_item(STORAGE_KEY, theme.name());
    }
}

/// A button that cycles system → light → dark.
#[component]
pub fn ThemeToggle() -> impl IntoView {
    let theme = RwSignal::new(Theme::System);
    #[cfg(feature = "hydrate")]
    Effect::new(move |first_done: Option<()>| {
        if first_done.is_none()
            && let Some(saved) = saved_theme()
        {
            theme.set(saved);
        }
        apply(theme.get());
    });
    view! {
        <button
            type="button"
            class="theme-toggle"
            data-testid="theme-toggle"
            title="Colour theme: system, light or dark"
            on:click=move |_| theme.update(|t| *t = t.next())
        >
            {move || format!("Theme: {}", theme.get().name())}
        </button>
    }
}
