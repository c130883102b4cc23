//! `-l` as kubectl reads it, turned into the `LabelSelector` a rollout's target holds: equality
//! (`app=web`, `app==web`, `tier!=cache`) and set-based requirements (`env in (prod,staging)`,
//! `env notin (dev)`, `canary`, `!canary`), comma-separated. Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::error::Error;

/// Reads a kubectl label selector as a `LabelSelector`: `key=value` requirements become
/// `matchLabels`, the others `matchExpressions`. An empty selector is refused: it would match
/// every pod of the namespace.
pub fn label_selector(text: &str) -> Result<LabelSelector, Error> {
    let mut labels = BTreeMap::new();
    let mut expressions = Vec::new();
    for requirement in split_requirements(text)? {
        match parse_requirement(requirement)? {
            Requirement::Equals(key, value) => {
                if labels.insert(key.clone(), value).is_some() {
                    return Err(invalid(format!("{key:?} is given twice")));
                }
            }
            Requirement::Expression(expression) => expressions.push(expression),
        }
    }
    if labels.is_empty() && expressions.is_empty() {
        return Err(invalid(
            "an empty selector would restart every pod of the namespace".to_owned(),
        ));
    }
    Ok(LabelSelector {
        match_labels: (!labels.is_empty()).then_some(labels),
        match_expressions: (!expressions.is_empty()).then_some(expressions),
    })
}

enum Requirement {
    Equals(String, String),
    Expression(LabelSelectorRequirement),
}

fn invalid(message: String) -> Error {
    Error::InvalidFlag {
        flag: "-l",
        message,
    }
}

/// The requirements of `text`: split at the commas outside parentheses, blanks dropped.
fn split_requirements(text: &str) -> Result<Vec<&str>, Error> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0_u32, 0);
    for (at, character) in text.char_indices() {
        match character {
            '(' if depth == 0 => depth = 1,
            '(' => return Err(invalid(format!("{text:?}: nested parentheses"))),
            ')' if depth == 1 => depth = 0,
            ')' => return Err(invalid(format!("{text:?}: a ')' without its '('"))),
            ',' if depth == 0 => {
                parts.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(invalid(format!("{text:?}: a '(' without its ')'")));
    }
    parts.push(&text[start..]);
    Ok(parts
        .into_iter()
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .collect())
}

fn parse_requirement(requirement: &str) -> Result<Requirement, Error> {
    let expression = |key: &str, operator: &str, values: Option<Vec<String>>| {
        checked_key(key, requirement).map(|key| {
            Requirement::Expression(LabelSelectorRequirement {
                key,
                operator: operator.to_owned(),
                values,
            })
        })
    };
    if let Some(key) = requirement.strip_prefix('!') {
        return expression(key.trim(), "DoesNotExist", None);
    }
    if let Some((key, value)) = requirement.split_once("!=") {
        return expression(key, "NotIn", Some(vec![checked_value(value, requirement)?]));
    }
    if let Some((key, value)) = requirement
        .split_once("==")
        .or_else(|| requirement.split_once('='))
    {
        return Ok(Requirement::Equals(
            checked_key(key, requirement)?,
            checked_value(value, requirement)?,
        ));
    }
    if let Some(open) = requirement.find('(') {
        let mut words = requirement[..open].split_whitespace();
        let (Some(key), Some(operator), None) = (words.next(), words.next(), words.next()) else {
            return Err(invalid(format!(
                "{requirement:?} is not `KEY in (VALUES)` or `KEY notin (VALUES)`"
            )));
        };
        let operator = match operator {
            "in" => "In",
            "notin" => "NotIn",
            other => {
                return Err(invalid(format!(
                    "{requirement:?}: {other:?} is not an operator (in, notin, =, ==, !=)"
                )));
            }
        };
        let inside = requirement[open + 1..].trim_end();
        let Some(inside) = inside.strip_suffix(')') else {
            return Err(invalid(format!("{requirement:?}: text after ')'")));
        };
        let values = inside
            .split(',')
            .map(|value| checked_value(value, requirement))
            .collect::<Result<Vec<_>, _>>()?;
        if values.iter().all(String::is_empty) {
            return Err(invalid(format!("{requirement:?}: no values")));
        }
        return expression(key, operator, Some(values));
    }
    if requirement.split_whitespace().count() > 1 {
        return Err(invalid(format!(
            "{requirement:?} is not a requirement (KEY=VALUE, KEY!=VALUE, KEY in (...), KEY notin (...), KEY, !KEY)"
        )));
    }
    expression(requirement, "Exists", None)
}

/// A label key: `[prefix/]name`, the name 1–63 characters of alphanumerics, `-`, `_` and `.`,
/// beginning and ending alphanumeric.
fn checked_key(key: &str, requirement: &str) -> Result<String, Error> {
    let key = key.trim();
    let name = key.rsplit_once('/').map_or(
        key,
        |(prefix, name)| {
            if prefix.is_empty() { "" } else { name }
        },
    );
    if !is_label_name(name) {
        return Err(invalid(format!(
            "{requirement:?}: {key:?} is not a label key"
        )));
    }
    Ok(key.to_owned())
}

/// A label value: empty, or as a key's name part.
fn checked_value(value: &str, requirement: &str) -> Result<String, Error> {
    let value = value.trim();
    if !value.is_empty() && !is_label_name(value) {
        return Err(invalid(format!(
            "{requirement:?}: {value:?} is not a label value"
        )));
    }
    Ok(value.to_owned())
}

fn is_label_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values: (!values.is_empty() || operator.ends_with("In"))
                .then(|| values.iter().map(|value| (*value).to_owned()).collect()),
        }
    }

    #[test]
    fn equality_requirements_are_match_labels() {
        let selector = label_selector("app=web, tier==front").unwrap();
        assert_eq!(
            selector.match_labels,
            Some(BTreeMap::from([
                ("app".to_owned(), "web".to_owned()),
                ("tier".to_owned(), "front".to_owned())
            ]))
        );
        assert_eq!(selector.match_expressions, None);
    }

    #[test]
    fn set_based_requirements_are_match_expressions() {
        let selector = label_selector(
            "app=web,env in (prod, staging),track notin (canary),tier!=cache,example.com/owned,!legacy",
        )
        .unwrap();
        assert_eq!(
            selector.match_labels,
            Some(BTreeMap::from([("app".to_owned(), "web".to_owned())]))
        );
        assert_eq!(
            selector.match_expressions,
            Some(vec![
                requirement("env", "In", &["prod", "staging"]),
                requirement("track", "NotIn", &["canary"]),
                requirement("tier", "NotIn", &["cache"]),
                requirement("example.com/owned", "Exists", &[]),
                requirement("legacy", "DoesNotExist", &[]),
            ])
        );
    }

    #[test]
    fn what_kubectl_refuses_is_refused_with_the_requirement_named() {
        for (text, said) in [
            ("", "empty selector"),
            (" , ", "empty selector"),
            ("env in (prod", "without its ')'"),
            ("env in prod)", "without its '('"),
            ("env in ((prod))", "nested"),
            ("env within (prod)", "not an operator"),
            ("env in ()", "no values"),
            ("env in (prod) x", "text after"),
            ("app web", "not a requirement"),
            ("-app=web", "not a label key"),
            ("app=we b", "not a label value"),
            ("app=web,app=api", "given twice"),
        ] {
            let error = label_selector(text).expect_err(text).to_string();
            assert!(error.contains(said), "{text:?}: {error}");
            assert!(error.starts_with("invalid -l: "), "{error}");
        }
    }
}
