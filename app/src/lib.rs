//! The Trainyard web UI: the page shell, navigation, routes and pages.
//! Compiled twice: with `ssr` into the server, with `hydrate` into the wasm.

mod account;
pub mod api;
mod audit;
pub mod error;
pub mod explorer;
pub mod gpus;
mod jobs;
mod lazy;
#[cfg(feature = "ssr")]
mod markdown;
mod node_agents;
mod pages;
#[cfg(any(feature = "ssr", test))]
mod submit;
mod theme;
pub mod usage;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::{Lazy, ParamSegment, SsrMode, StaticSegment};

use lazy::*;

/// The HTML document around the app, rendered on the server.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <meta name="color-scheme" content="light dark"/>
                <link rel="icon" href="/favicon.svg" type="image/svg+xml"/>
                <HydrationScripts options/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

/// A page title made of names people chose (runs, experiments, jobs),
/// safe to render: leptos_meta writes the title into the server's HTML
/// unescaped, so `<` and `&` become look-alikes that no parser reads as
/// markup. (Escaping them instead would show `&lt;` once the browser
/// takes the title over.)
pub fn inert_title(text: &str) -> String {
    text.replace('<', "\u{2039}").replace('&', "\u{FF06}")
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    let me = account::provide_me();
    view! {
        <Stylesheet id="trainyard" href="/pkg/trainyard.css"/>
        <Title formatter=|page: String| if page.is_empty() { "Trainyard".to_owned() } else { format!("{} · Trainyard", inert_title(&page)) }/>
        <Router>
            <account::TopBar me/>
            <main>
                // In-order streaming: the data is in the HTML itself, so pages
                // read without JavaScript, and crawlers and `curl` see it too.
                <Routes fallback=pages::NotFound>
                    <Route path=StaticSegment("") view=pages::HomePage ssr=SsrMode::InOrder/>
                    <Route path=StaticSegment("experiments") view=explorer::ExperimentsPage ssr=SsrMode::InOrder/>
                    <Route path=(StaticSegment("experiments"), ParamSegment("id")) view=explorer::ExperimentPage ssr=SsrMode::InOrder/>
                    <Route path=(StaticSegment("experiments"), ParamSegment("experiment"), StaticSegment("runs"), ParamSegment("run")) view=explorer::RunPage ssr=SsrMode::InOrder/>
                    <Route path=(StaticSegment("experiments"), ParamSegment("experiment"), StaticSegment("traces")) view={Lazy::<TracesRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=(StaticSegment("experiments"), ParamSegment("experiment"), StaticSegment("traces"), ParamSegment("trace")) view={Lazy::<TraceRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=(StaticSegment("experiments"), ParamSegment("experiment"), StaticSegment("datasets")) view={Lazy::<DatasetsRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=(StaticSegment("experiments"), ParamSegment("experiment"), StaticSegment("datasets"), ParamSegment("dataset")) view={Lazy::<DatasetRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=(StaticSegment("experiments"), ParamSegment("experiment"), StaticSegment("scorers")) view={Lazy::<ScorersRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=StaticSegment("models") view={Lazy::<ModelsRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=StaticSegment("compare") view={Lazy::<CompareRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=StaticSegment("jobs") view=jobs::JobsPage ssr=SsrMode::InOrder/>
                    <Route path=(StaticSegment("jobs"), ParamSegment("id")) view=jobs::JobPage ssr=SsrMode::InOrder/>
                    <Route path=StaticSegment("submit") view={Lazy::<SubmitRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=(StaticSegment("templates"), StaticSegment("new")) view={Lazy::<TemplateEditorRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=(StaticSegment("templates"), ParamSegment("slug"), StaticSegment("edit")) view={Lazy::<TemplateEditorRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=StaticSegment("templates") view={Lazy::<TemplatesRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=StaticSegment("usage") view={Lazy::<UsageRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=StaticSegment("admin") view={Lazy::<AdminRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=(StaticSegment("admin"), StaticSegment("gpus")) view={Lazy::<GpusRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=(StaticSegment("admin"), StaticSegment("audit")) view=audit::AuditPage ssr=SsrMode::InOrder/>
                    <Route path=(StaticSegment("admin"), StaticSegment("gpus"), ParamSegment("node")) view={Lazy::<NodeGpusRoute>::new()} ssr=SsrMode::InOrder/>
                    <Route path=(StaticSegment("settings"), StaticSegment("tokens")) view={Lazy::<TokensRoute>::new()} ssr=SsrMode::InOrder/>
                </Routes>
            </main>
            <footer class="footer">"Trainyard " {env!("CARGO_PKG_VERSION")}</footer>
        </Router>
    }
}
