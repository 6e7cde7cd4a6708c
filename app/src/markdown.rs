//! Descriptions as the MLflow UI shows them: Markdown (CommonMark with
//! tables, strikethrough and task lists), made into HTML on the server.
//!
//! A description is anyone's text, so the HTML is safe to put in a page as
//! it is: HTML written in the text is shown as text, and links and images
//! keep only addresses that cannot run anything (http, https, mailto, or
//! this server's own paths). The page's policy would stop a script anyway.

use pulldown_cmark::{CowStr, Event, Options, Parser, Tag};

/// `text` (a run's or a model's description) as HTML.
pub fn to_html(text: &str) -> String {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let events = Parser::new_ext(text, options).map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) => Event::Start(Tag::Link {
            link_type,
            dest_url: safe_url(dest_url),
            title,
            id,
        }),
        Event::Start(Tag::Image {
            link_type,
            dest_url,
            title,
            id,
        }) => Event::Start(Tag::Image {
            link_type,
            dest_url: safe_url(dest_url),
            title,
            id,
        }),
        other => other,
    });
    let mut html = String::with_capacity(text.len() * 3 / 2);
    pulldown_cmark::html::push_html(&mut html, events);
    html
}

/// The address if it is http(s), mailto or has no scheme (a path on this
/// server, a `#` place); otherwise `#`, so `javascript:` and `data:` do
/// nothing.
fn safe_url(url: CowStr<'_>) -> CowStr<'_> {
    let scheme_end = url.find([':', '/', '?', '#']);
    let safe = match scheme_end {
        Some(at) if url[at..].starts_with(':') => {
            let scheme = url[..at].to_ascii_lowercase();
            matches!(scheme.as_str(), "http" | "https" | "mailto")
        }
        // No scheme at all; a control character or space in front of one
        // (` javascript:`) is not read as one by the parser's address.
        _ => !url.starts_with(|c: char| c.is_whitespace() || c.is_control()),
    };
    if safe { url } else { CowStr::Borrowed("#") }
}

#[cfg(test)]
mod tests {
    use super::to_html;

    #[test]
    fn markdown_becomes_html() {
        let html = to_html(
            "# Sweep\n\nBest **lr** is `0.01`; see [run](/experiments/1/runs/a).\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- [x] done\n",
        );
        assert!(html.contains("<h1>Sweep</h1>"), "{html}");
        assert!(html.contains("<strong>lr</strong>"), "{html}");
        assert!(html.contains("<code>0.01</code>"), "{html}");
        assert!(
            html.contains(r#"<a href="/experiments/1/runs/a">run</a>"#),
            "{html}"
        );
        assert!(html.contains("<table>"), "{html}");
        assert!(html.contains("checked"), "{html}");
    }

    #[test]
    fn written_html_is_text_and_unsafe_addresses_do_nothing() {
        let html = to_html(
            "<script>alert(1)</script>\n\nhi <img src=x onerror=alert(2)>\n\n[a](javascript:alert(3)) [b](JavaScript:alert(4)) [c](data:text/html,x) ![d](vbscript:x) [e](https://example.org/?q=1&r=\"2\") <javascript:alert(5)>",
        );
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img src=x"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        let lower = html.to_ascii_lowercase();
        assert!(!lower.contains(r#"href="javascript"#), "{html}");
        assert!(!lower.contains(r#"href="data"#), "{html}");
        assert!(!lower.contains(r#"src="vbscript"#), "{html}");
        assert_eq!(lower.matches(r##"href="#""##).count(), 4, "{html}");
        assert!(
            html.contains(r#"href="https://example.org/?q=1&amp;r=%222%22""#),
            "{html}"
        );
    }
}
