//! What every admin page shares: the frame, its style, the status badge, and
//! how values, ages and times are written.

use std::fmt::Write as _;

use axum::response::Html;
use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::store::TaskSummary;

/// How often the pages reload themselves: each reload of the list costs a
/// grouped count and a page's query.
const REFRESH_SECS: u32 = 10;

pub(super) fn status_badge(task: &TaskSummary) -> Markup {
    html! {
        span class=(format!("badge {}", task.status.as_str())) { (task.status.as_str()) }
        @if task.cancel_requested && !task.status.is_terminal() { " " span.badge.cancelling { "cancel requested" } }
        @if task.is_asleep() { " " span.badge.sleeping { "asleep" } }
    }
}

pub(super) fn page(title: &str, body: Markup) -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta http-equiv="refresh" content=(REFRESH_SECS);
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (title) " · mcp-tasks" }
                    style { (PreEscaped(CSS)) }
                }
                body {
                    header { h1 { a href="/" { "mcp-tasks" } " " span.sub { (title) } } span.note { "read-only operator view · refreshes every " (REFRESH_SECS) " s" } }
                    main { (body) }
                }
            }
        }
        .into_string(),
    )
}

const CSS: &str = "
:root{--fg:#1f2933;--muted:#6b7785;--line:#e4e7eb;--bg:#f7f8fa;--card:#fff;
--working:#2563eb;--input_required:#d97706;--completed:#059669;--failed:#dc2626;--cancelled:#6b7280}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:var(--fg);background:var(--bg)}
header{display:flex;justify-content:space-between;align-items:baseline;padding:14px 24px;background:var(--card);border-bottom:1px solid var(--line)}
h1{margin:0;font-size:18px}h1 a{color:inherit;text-decoration:none}.sub{color:var(--muted);font-weight:400}
.note{color:var(--muted);font-size:12px}
main{padding:20px 24px;max-width:1200px}
h2{font-size:15px;margin:24px 0 8px}
a{color:var(--working)}
.scope{color:var(--muted);margin:0 0 12px}
.counts{display:flex;gap:8px;flex-wrap:wrap;margin-bottom:12px}
.chip{padding:4px 10px;border:1px solid var(--line);border-radius:999px;background:var(--card);color:var(--fg);text-decoration:none}
.chip.on{border-color:var(--fg)}.chip .n{font-weight:600}
.chip.working .n{color:var(--working)}.chip.input_required .n{color:var(--input_required)}
.chip.completed .n{color:var(--completed)}.chip.failed .n{color:var(--failed)}.chip.cancelled .n{color:var(--cancelled)}
.filters{display:flex;gap:12px;align-items:center;margin-bottom:16px;color:var(--muted)}
.filters input[type=text]{padding:4px 6px;border:1px solid var(--line);border-radius:4px}
.filters button{padding:4px 12px;border:1px solid var(--line);border-radius:4px;background:var(--card);cursor:pointer}
table{border-collapse:collapse;width:100%;background:var(--card);border:1px solid var(--line);border-radius:6px}
th,td{text-align:left;padding:7px 10px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);font-weight:600}
td.id,dd.id,code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
td.num{font-variant-numeric:tabular-nums}td.msg{color:var(--muted)}
.badge{display:inline-block;padding:1px 8px;border-radius:4px;font-size:12px;color:#fff;background:var(--muted)}
.badge.working{background:var(--working)}.badge.input_required{background:var(--input_required)}
.badge.completed{background:var(--completed)}.badge.failed{background:var(--failed)}.badge.cancelled{background:var(--cancelled)}
.badge.sleeping{background:#7c3aed}.badge.cancelling{background:#9f1239}
dl.summary{display:grid;grid-template-columns:120px 1fr;gap:6px 16px;background:var(--card);border:1px solid var(--line);border-radius:6px;padding:14px 16px;margin:0}
dt{color:var(--muted)}dd{margin:0;word-break:break-all}
ol.timeline{list-style:none;margin:0;padding:0 0 0 14px;border-left:2px solid var(--line)}
ol.timeline li{position:relative;display:flex;gap:12px;align-items:baseline;padding:6px 0}
ol.timeline li::before{content:'';position:absolute;left:-20px;top:12px;width:10px;height:10px;border-radius:50%;background:var(--working)}
ol.timeline li[data-kind=input]::before{background:var(--input_required)}
.pos{color:var(--muted);min-width:2em;font-variant-numeric:tabular-nums}.kind{color:var(--muted);min-width:6em}.name{font-weight:600}
.value{color:var(--muted);word-break:break-all}
.error{color:var(--failed)}.empty,.more{color:var(--muted)}
.pages{display:flex;gap:16px;align-items:baseline;margin-top:12px}
";

pub(super) fn truncate(s: &str, max: usize) -> String {
    let one_line = s.replace('\n', " ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// A span of milliseconds, roughly: `42s`, `3m`, `5h`, `2d`.
pub(super) fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    let mut out = String::new();
    let _ = match s {
        0..60 => write!(out, "{s}s"),
        60..3600 => write!(out, "{}m", s / 60),
        3600..86_400 => write!(out, "{}h", s / 3600),
        _ => write!(out, "{}d", s / 86_400),
    };
    out
}

pub(super) fn rfc3339(ms: i64) -> String {
    humantime::format_rfc3339_seconds(crate::clock::system_time(ms)).to_string()
}
