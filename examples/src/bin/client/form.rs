//! Answering a form (`elicitation/create`): on a terminal, one prompt per
//! field, typed by its schema; otherwise, line by line from stdin.

use std::io::{BufRead as _, Write as _};

use dialoguer::{Confirm, Input, MultiSelect, Select, theme::ColorfulTheme};
use serde_json::{Map, Value, json};

use crate::ui::{Ui, is_interrupt};

/// Answers a form (an `elicitation/create`'s params): the result's JSON.
pub(crate) fn ask(ui: &Ui, params: &Value) -> Value {
    if params["mode"] == "url" {
        let said = format!(
            "? {}\n  (open {} to answer; declining here)",
            params["message"].as_str().unwrap_or("The server asks:"),
            params["url"]
        );
        ui.prompt(|| eprintln!("{said}"));
        return json!({"action": "decline"});
    }
    let fields = fields(&params["requestedSchema"]);
    if ui.interactive {
        ask_on_terminal(ui, params, &fields)
    } else {
        ui.prompt(|| ask_by_lines(params, &fields))
    }
}

/// One field of a form, as its schema says.
#[derive(Debug)]
struct Field {
    name: String,
    /// The title, else the description, else the name.
    label: String,
    /// The description, when the title is the label.
    help: Option<String>,
    required: bool,
    default: Option<Value>,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Boolean,
    /// One of `values`, shown as `titles`.
    Choice {
        values: Vec<Value>,
        titles: Vec<String>,
    },
    /// Several of `values`.
    Choices {
        values: Vec<Value>,
        titles: Vec<String>,
        min: Option<u64>,
        max: Option<u64>,
    },
    Number {
        integer: bool,
        min: Option<f64>,
        max: Option<f64>,
    },
    Text {
        min: Option<u64>,
        max: Option<u64>,
        format: Option<String>,
    },
}

/// The options of a choice: `enum` (titled by `enumNames` when present), or
/// `oneOf` / `anyOf` of `{const, title}`.
fn options(schema: &Value) -> Option<(Vec<Value>, Vec<String>)> {
    if let Some(values) = schema["enum"].as_array() {
        let names = schema["enumNames"].as_array();
        let titles = values
            .iter()
            .enumerate()
            .map(|(i, v)| match names.and_then(|n| n.get(i)?.as_str()) {
                Some(name) => name.to_owned(),
                None => plain(v),
            })
            .collect();
        return Some((values.clone(), titles));
    }
    let options = schema["oneOf"].as_array().or(schema["anyOf"].as_array())?;
    let values: Vec<Value> = options
        .iter()
        .filter_map(|o| o.get("const"))
        .cloned()
        .collect();
    let titles = options
        .iter()
        .filter(|o| o.get("const").is_some())
        .map(|o| match o["title"].as_str() {
            Some(title) => title.to_owned(),
            None => plain(&o["const"]),
        })
        .collect();
    (!values.is_empty()).then_some((values, titles))
}

/// A value as a person reads it: strings without quotes.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The fields of a `requestedSchema`, in its order.
fn fields(schema: &Value) -> Vec<Field> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut out = Vec::new();
    for (name, field) in schema["properties"].as_object().into_iter().flatten() {
        let (label, help) = match (field["title"].as_str(), field["description"].as_str()) {
            (Some(title), description) => (title, description.filter(|d| *d != title)),
            (None, Some(description)) => (description, None),
            (None, None) => (name.as_str(), None),
        };
        let kind = match field["type"].as_str().unwrap_or("string") {
            "boolean" => Kind::Boolean,
            "integer" | "number" => Kind::Number {
                integer: field["type"] == "integer",
                min: field["minimum"].as_f64(),
                max: field["maximum"].as_f64(),
            },
            "array" => {
                let (values, titles) = options(&field["items"]).unwrap_or_default();
                Kind::Choices {
                    values,
                    titles,
                    min: field["minItems"].as_u64(),
                    max: field["maxItems"].as_u64(),
                }
            }
            _ => match options(field) {
                Some((values, titles)) => Kind::Choice { values, titles },
                None => Kind::Text {
                    min: field["minLength"].as_u64(),
                    max: field["maxLength"].as_u64(),
                    format: field["format"].as_str().map(str::to_owned),
                },
            },
        };
        out.push(Field {
            name: name.clone(),
            label: label.to_owned(),
            help: help.map(str::to_owned),
            required: required.contains(&name.as_str()),
            default: field.get("default").cloned(),
            kind,
        });
    }
    out
}

/// What a number's bounds allow, for the prompt: ` (integer, 1 to 8)`.
fn number_hint(integer: bool, min: Option<f64>, max: Option<f64>) -> String {
    let kind = if integer { "integer" } else { "number" };
    match (min, max) {
        (Some(min), Some(max)) => format!(" ({kind}, {min} to {max})"),
        (Some(min), None) => format!(" ({kind}, at least {min})"),
        (None, Some(max)) => format!(" ({kind}, at most {max})"),
        (None, None) => format!(" ({kind})"),
    }
}

/// A number typed as `text`, checked; `Err` says what is expected.
fn number(text: &str, integer: bool, min: Option<f64>, max: Option<f64>) -> Result<Value, String> {
    let (value, n) = if integer {
        let n: i64 = text.parse().map_err(|_| "not a whole number".to_owned())?;
        (json!(n), n as f64)
    } else {
        let n: f64 = text
            .parse()
            .ok()
            .filter(|n: &f64| n.is_finite())
            .ok_or_else(|| "not a number".to_owned())?;
        (json!(n), n)
    };
    if let Some(min) = min
        && n < min
    {
        return Err(format!("must be at least {min}"));
    }
    if let Some(max) = max
        && n > max
    {
        return Err(format!("must be at most {max}"));
    }
    Ok(value)
}

/// Text checked against its length bounds.
fn text(text: &str, min: Option<u64>, max: Option<u64>) -> Result<(), String> {
    let len = text.chars().count() as u64;
    if let Some(min) = min
        && len < min
    {
        return Err(format!("must be at least {min} characters"));
    }
    if let Some(max) = max
        && len > max
    {
        return Err(format!("must be at most {max} characters"));
    }
    Ok(())
}

/// One field's answer on the terminal.
enum Answer {
    Value(Value),
    /// No answer (Esc, or an empty line): skips an optional field; on a
    /// required one, offers to decline the form.
    Missing,
    /// No answer to an optional field.
    Skip,
    /// The user declines the whole form.
    Decline,
}

/// The form, one prompt per field. Ctrl-C in a prompt asks whether to
/// cancel the task ([`Ui::decided`]): no asks the field again, yes answers
/// `cancel`.
fn ask_on_terminal(ui: &Ui, params: &Value, fields: &[Field]) -> Value {
    let title = params["message"].as_str().unwrap_or("The server asks:");
    let has_required = fields.iter().any(|f| f.required);
    let _no_spinner = ui.hold();
    ui.prompt(|| {
        eprintln!("? {title}");
        if has_required {
            eprintln!("  (* required)");
        }
    });
    let theme = ColorfulTheme::default();
    let mut content = Map::new();
    for field in fields {
        loop {
            let (asked, answered) = ui.prompt(|| (ask_field(&theme, field), ui.answered()));
            match asked {
                Ok(Answer::Value(v)) => {
                    content.insert(field.name.clone(), v);
                }
                Ok(Answer::Skip | Answer::Missing) => {}
                Ok(Answer::Decline) => return json!({"action": "decline"}),
                Err(e) if is_interrupt(&e) => {
                    if ui.decided(answered) {
                        return json!({"action": "cancel"});
                    }
                    continue;
                }
                Err(_) => return json!({"action": "cancel"}),
            }
            break;
        }
    }
    json!({"action": "accept", "content": content})
}

/// Asks one field until it is answered, skipped or the form declined;
/// blocks.
fn ask_field(theme: &ColorfulTheme, field: &Field) -> dialoguer::Result<Answer> {
    loop {
        match ask_once(theme, field)? {
            Answer::Missing if !field.required => return Ok(Answer::Skip),
            Answer::Missing => {
                if decline(theme)? {
                    return Ok(Answer::Decline);
                }
            }
            answer => return Ok(answer),
        }
    }
}

/// Asks one field once.
fn ask_once(theme: &ColorfulTheme, field: &Field) -> dialoguer::Result<Answer> {
    let mark = if field.required { " *" } else { "" };
    let help = field
        .help
        .as_deref()
        .map(|h| format!(" — {h}"))
        .unwrap_or_default();
    match &field.kind {
        Kind::Boolean => {
            let mut prompt =
                Confirm::with_theme(theme).with_prompt(format!("{}{mark}{help}", field.label));
            if let Some(default) = field.default.as_ref().and_then(Value::as_bool) {
                prompt = prompt.default(default);
            }
            Ok(match prompt.interact_opt()? {
                Some(yes) => Answer::Value(json!(yes)),
                None => Answer::Missing, // Esc or `q`
            })
        }
        Kind::Choice { values, titles } => {
            let default = field
                .default
                .as_ref()
                .and_then(|d| values.iter().position(|v| v == d))
                .unwrap_or(0);
            let picked = Select::with_theme(theme)
                .with_prompt(format!("{}{mark}{help}", field.label))
                .items(titles)
                .default(default)
                .interact_opt()?;
            Ok(match picked {
                Some(i) => Answer::Value(values[i].clone()),
                None => Answer::Missing, // Esc or `q`
            })
        }
        Kind::Choices {
            values,
            titles,
            min,
            max,
        } => {
            let defaults: Vec<bool> = values
                .iter()
                .map(|v| {
                    field
                        .default
                        .as_ref()
                        .and_then(Value::as_array)
                        .is_some_and(|d| d.contains(v))
                })
                .collect();
            loop {
                let picked = MultiSelect::with_theme(theme)
                    .with_prompt(format!(
                        "{}{mark}{help} (space to pick, enter when done)",
                        field.label
                    ))
                    .items(titles)
                    .defaults(&defaults)
                    .interact_opt()?;
                let Some(picked) = picked else {
                    return Ok(Answer::Missing);
                };
                let count = picked.len() as u64;
                if let Some(min) = min
                    && count < *min
                {
                    eprintln!("  pick at least {min}");
                    continue;
                }
                if let Some(max) = max
                    && count > *max
                {
                    eprintln!("  pick at most {max}");
                    continue;
                }
                let chosen: Vec<Value> = picked.into_iter().map(|i| values[i].clone()).collect();
                return Ok(Answer::Value(json!(chosen)));
            }
        }
        Kind::Number { integer, min, max } => {
            let (integer, min, max) = (*integer, *min, *max);
            let hint = number_hint(integer, min, max);
            let mut prompt = Input::<String>::with_theme(theme)
                .with_prompt(format!("{}{mark}{hint}{help}", field.label))
                .allow_empty(true)
                .validate_with(move |text: &String| -> Result<(), String> {
                    if text.is_empty() {
                        return Ok(());
                    }
                    number(text.trim(), integer, min, max).map(|_| ())
                });
            if let Some(default) = &field.default {
                prompt = prompt.default(plain(default));
            }
            let typed = prompt.interact_text()?;
            let typed = typed.trim();
            if typed.is_empty() {
                return Ok(Answer::Missing);
            }
            // Checked by the prompt already.
            Ok(number(typed, integer, min, max).map_or(Answer::Missing, Answer::Value))
        }
        Kind::Text { min, max, format } => {
            let (min, max) = (*min, *max);
            let hint = format
                .as_deref()
                .map(|f| format!(" ({f})"))
                .unwrap_or_default();
            let mut prompt = Input::<String>::with_theme(theme)
                .with_prompt(format!("{}{mark}{hint}{help}", field.label))
                .allow_empty(true)
                .validate_with(move |typed: &String| -> Result<(), String> {
                    if typed.is_empty() {
                        return Ok(());
                    }
                    text(typed, min, max)
                });
            if let Some(default) = &field.default {
                prompt = prompt.default(plain(default));
            }
            let typed = prompt.interact_text()?;
            if typed.is_empty() {
                return Ok(Answer::Missing);
            }
            Ok(Answer::Value(json!(typed)))
        }
    }
}

/// After an empty answer to a required field: decline the whole form?
fn decline(theme: &ColorfulTheme) -> dialoguer::Result<bool> {
    Confirm::with_theme(theme)
        .with_prompt("This field is required. Decline the whole question?")
        .default(false)
        .interact()
}

fn read_line(prompt: &str) -> Option<String> {
    eprint!("{prompt}");
    std::io::stderr().flush().ok()?;
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).ok()? == 0 {
        return None;
    }
    Some(line.trim().to_owned())
}

/// One answer typed as a line, checked against its field; `Err` says why
/// not. A choice is taken by name or by its number in the list.
fn parse_line(field: &Field, line: &str) -> Result<Value, String> {
    match &field.kind {
        Kind::Boolean => match line.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => Ok(json!(true)),
            "n" | "no" | "false" => Ok(json!(false)),
            _ => Err("y or n".to_owned()),
        },
        Kind::Number { integer, min, max } => number(line, *integer, *min, *max).map_err(|e| {
            if e.starts_with("not") {
                if *integer {
                    "a whole number"
                } else {
                    "a number"
                }
                .to_owned()
            } else {
                e
            }
        }),
        Kind::Choice { values, titles } => {
            let by_number = line
                .parse::<usize>()
                .ok()
                .and_then(|i| values.get(i.wrapping_sub(1)));
            let by_name = values
                .iter()
                .zip(titles)
                .find(|(v, t)| plain(v) == line || *t == line)
                .map(|(v, _)| v);
            by_number.or(by_name).cloned().ok_or_else(|| {
                let names: Vec<String> = values.iter().map(plain).collect();
                format!("one of {}", names.join(", "))
            })
        }
        Kind::Choices { values, titles, .. } => {
            let mut chosen = Vec::new();
            for part in line.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let field = Field {
                    name: String::new(),
                    label: String::new(),
                    help: None,
                    required: false,
                    default: None,
                    kind: Kind::Choice {
                        values: values.clone(),
                        titles: titles.clone(),
                    },
                };
                chosen.push(parse_line(&field, part)?);
            }
            Ok(json!(chosen))
        }
        Kind::Text { min, max, .. } => text(line, *min, *max).map(|()| json!(line)),
    }
}

/// The form, line by line from stdin (no terminal): an empty answer to a
/// required field (or the end of input) declines it.
fn ask_by_lines(params: &Value, fields: &[Field]) -> Value {
    eprintln!(
        "? {}",
        params["message"].as_str().unwrap_or("The server asks:")
    );
    let mut content = Map::new();
    for field in fields {
        let hint = match &field.kind {
            Kind::Boolean => " [y/n]".to_owned(),
            Kind::Choice { values, .. } => {
                let names: Vec<String> = values.iter().map(plain).collect();
                format!(" [{}]", names.join("/"))
            }
            Kind::Choices { values, .. } => {
                let names: Vec<String> = values.iter().map(plain).collect();
                format!(" [{}, comma-separated]", names.join("/"))
            }
            Kind::Number { integer, min, max } => number_hint(*integer, *min, *max),
            Kind::Text { format, .. } => format
                .as_deref()
                .map(|f| format!(" ({f})"))
                .unwrap_or_default(),
        };
        let mark = if field.required { "*" } else { "" };
        loop {
            let Some(line) = read_line(&format!("  {}{mark}{hint}: ", field.label)) else {
                return json!({"action": "cancel"});
            };
            if line.is_empty() {
                if field.required {
                    return json!({"action": "decline"});
                }
                break;
            }
            match parse_line(field, &line) {
                Ok(v) => {
                    content.insert(field.name.clone(), v);
                    break;
                }
                Err(expected) => eprintln!("  not a valid answer: {expected}"),
            }
        }
    }
    json!({"action": "accept", "content": content})
}
