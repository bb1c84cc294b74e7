//! Reading a model's answer back into listed actions, forgiving what real
//! models do.
//!
//! An answer names exactly one listed action. Forgiven: a structured
//! answer (`{"action": "north"}`, `{"actions": […]}`), case, quotes, list
//! markers and words around it (`I'll try "read sign".`), a browser
//! action's label without its kind (`Enter` for `key:Enter`, `click Start`
//! for `click:Start`), the kind alone when one action has it (`click` when
//! only `click:Start` is listed), and the number of an action in the
//! prompt's numbered list (`3`). Not forgiven: another action (a listed
//! `north` is not found in `northeast`) and two listed actions (ambiguous).
//! Alternatives (`jev`) are read a line each, or from a comma- or
//! semicolon-separated list on one line.

/// The actions an answer names: one for `wanted == 1`; up to `wanted`
/// distinct ones otherwise. Why not, as "names no listed action" or
/// "names more than one listed action (…)".
pub fn pick(text: &str, allowed: &[String], wanted: usize) -> Result<Vec<String>, String> {
    if let Some(value) = structured(text) {
        return pick_structured(&value, allowed, wanted);
    }
    if wanted > 1 {
        let mut picked: Vec<String> = Vec::with_capacity(wanted);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let named = match match_action(line, allowed) {
                Ok(action) => vec![action],
                // `north, east, south`: a list on one line.
                Err(_) => line
                    .split([',', ';'])
                    .filter_map(|part| match_action(part, allowed).ok())
                    .collect(),
            };
            for action in named {
                if !picked.contains(&action) {
                    picked.push(action);
                }
            }
            if picked.len() >= wanted {
                picked.truncate(wanted);
                break;
            }
        }
        if !picked.is_empty() {
            return Ok(picked);
        }
    }
    match_action(text, allowed).map(|action| vec![action])
}

/// The JSON object of a structured answer, if the answer is one.
fn structured(text: &str) -> Option<serde_json::Value> {
    let trimmed = text.trim();
    if !trimmed.starts_with('{') {
        return None;
    }
    serde_json::from_str::<serde_json::Value>(trimmed)
        .ok()
        .filter(|v| v.get("action").is_some() || v.get("actions").is_some())
}

/// `{"action": …}` or `{"actions": […]}`, each read as a text answer.
fn pick_structured(
    value: &serde_json::Value,
    allowed: &[String],
    wanted: usize,
) -> Result<Vec<String>, String> {
    let named: Vec<&str> = match (value.get("action"), value.get("actions")) {
        (Some(serde_json::Value::String(one)), _) => vec![one.as_str()],
        (_, Some(serde_json::Value::Array(many))) => {
            many.iter().filter_map(serde_json::Value::as_str).collect()
        }
        _ => Vec::new(),
    };
    let mut picked: Vec<String> = Vec::with_capacity(wanted);
    let mut why = "names no listed action".to_owned();
    for name in named {
        match match_action(name, allowed) {
            Ok(action) if !picked.contains(&action) => picked.push(action),
            Ok(_) => {}
            Err(e) => why = e,
        }
    }
    picked.truncate(wanted.max(1));
    if picked.is_empty() {
        Err(why)
    } else {
        Ok(picked)
    }
}

/// The one listed action `text` names (see the module doc for the rules).
pub fn match_action(text: &str, allowed: &[String]) -> Result<String, String> {
    let cleaned = clean(text);
    let listed: Vec<&String> = allowed.iter().filter(|a| !a.trim().is_empty()).collect();
    if let Some(exact) = listed.iter().find(|a| a.trim().to_lowercase() == cleaned) {
        return Ok((*exact).clone());
    }
    // The label without its kind, or with a space for the colon.
    let by_label: Vec<&&String> = listed
        .iter()
        .filter(|a| {
            kind_and_label(a).is_some_and(|(kind, label)| {
                let label = label.to_lowercase();
                cleaned == label || cleaned == format!("{kind} {label}")
            })
        })
        .collect();
    if let [one] = by_label.as_slice() {
        return Ok((**one).clone());
    }
    // The number of an action in the prompt's list.
    if let Ok(n) = cleaned.parse::<usize>()
        && (1..=listed.len()).contains(&n)
    {
        return Ok(listed[n - 1].clone());
    }
    // The kind alone, when one listed action has it.
    let of_kind: Vec<&&String> = listed
        .iter()
        .filter(|a| kind_and_label(a).is_some_and(|(kind, _)| kind == cleaned))
        .collect();
    match of_kind.as_slice() {
        [one] => return Ok((**one).clone()),
        [_, _, ..] => {
            return Err(format!(
                "names a kind of action, `{cleaned}`, that {} listed actions have",
                of_kind.len()
            ));
        }
        [] => {}
    }
    named_in(text, &listed)
}

/// `text` without list markers, quotes, emphasis and end punctuation, in
/// lower case: `1. **North**!` is `north`.
fn clean(text: &str) -> String {
    without_list_marker(text.trim())
        .trim_matches(|c: char| {
            c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '*' | '.' | '!' | ',' | ':' | ';')
        })
        .to_lowercase()
}

/// `text` without a leading `- `, `* `, `1. ` or `2) `; a bare number is
/// kept (it may be the number of an action).
fn without_list_marker(text: &str) -> &str {
    if let Some(rest) = text.strip_prefix(['-', '*', '•'])
        && rest.starts_with(char::is_whitespace)
    {
        return rest;
    }
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits > 0
        && let Some(rest) = text[digits..].strip_prefix(['.', ')'])
        && rest.starts_with(char::is_whitespace)
        && !rest.trim().is_empty()
    {
        return rest;
    }
    text
}

/// A browser action's kind and label: `click:Start` is (`click`, `Start`).
/// Text games' actions have no kind.
fn kind_and_label(action: &str) -> Option<(&str, &str)> {
    let (kind, label) = action.split_once(':')?;
    let is_kind = !kind.is_empty() && kind.chars().all(|c| c.is_ascii_lowercase());
    (is_kind && !label.trim().is_empty()).then_some((kind, label.trim()))
}

/// The one listed action a sentence names as whole words: the action
/// itself, else its label.
fn named_in(text: &str, listed: &[&String]) -> Result<String, String> {
    let lower = text.to_lowercase();
    let whole = found(&lower, listed, |a| Some(a.trim().to_lowercase()));
    let found = if whole.is_empty() {
        found(&lower, listed, |a| {
            kind_and_label(a).map(|(_, label)| label.to_lowercase())
        })
    } else {
        whole
    };
    // `go north` names `north` too: an action only found inside another
    // found action does not count.
    let mut named: Vec<&String> = Vec::with_capacity(found.len());
    for (action, spans) in &found {
        let inside_other = spans.iter().all(|&(s, e)| {
            found.iter().any(|(other, others)| {
                other != action
                    && others
                        .iter()
                        .any(|&(os, oe)| os <= s && e <= oe && (oe - os) > (e - s))
            })
        });
        if !inside_other && !named.contains(action) {
            named.push(action);
        }
    }
    match named.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err("names no listed action".to_owned()),
        many => Err(format!(
            "names more than one listed action ({})",
            many.iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Each listed action whose `form` occurs in `lower`, with where.
fn found<'a>(
    lower: &str,
    listed: &[&'a String],
    form: impl Fn(&str) -> Option<String>,
) -> Vec<(&'a String, Vec<(usize, usize)>)> {
    listed
        .iter()
        .filter_map(|a| {
            let needle = form(a)?;
            let at = occurrences(lower, &needle);
            (!needle.is_empty() && !at.is_empty()).then_some((*a, at))
        })
        .collect()
}

/// Where `needle` occurs in `haystack` with no letter or digit either side.
fn occurrences(haystack: &str, needle: &str) -> Vec<(usize, usize)> {
    let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    haystack
        .match_indices(needle)
        .map(|(start, m)| (start, start + m.len()))
        .filter(|&(s, e)| {
            !word(haystack[..s].chars().next_back()) && !word(haystack[e..].chars().next())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn an_answer_names_one_listed_action_whatever_its_case_quotes_and_words() {
        let listed = actions(&["north", "go east", "Open Door"]);
        for (answer, expected) in [
            ("north", "north"),
            ("  NORTH.\n", "north"),
            ("\"open door\"", "Open Door"),
            ("`go east`", "go east"),
            ("I think I will go east, it looks safer.", "go east"),
            ("1. north", "north"),
            ("- north", "north"),
            ("**Open door**!", "Open Door"),
            ("{\"action\": \"north\"}", "north"),
            ("2", "go east"),
            ("3.", "Open Door"),
        ] {
            assert_eq!(
                match_action(answer, &listed).as_deref(),
                Ok(expected),
                "{answer}"
            );
        }
        assert_eq!(
            pick("{\"action\": \"Open Door\"}", &listed, 1),
            Ok(actions(&["Open Door"]))
        );
    }

    #[test]
    fn a_browser_action_is_found_by_its_label_or_by_its_kind_when_only_one_has_it() {
        let listed = actions(&["key:Enter", "click:Start", "key:ArrowUp"]);
        for (answer, expected) in [
            ("Enter", "key:Enter"),
            ("start", "click:Start"),
            ("click Start", "click:Start"),
            ("key ArrowUp", "key:ArrowUp"),
            ("click", "click:Start"),
            ("I press Enter to begin.", "key:Enter"),
            ("`key:ArrowUp`", "key:ArrowUp"),
        ] {
            assert_eq!(
                match_action(answer, &listed).as_deref(),
                Ok(expected),
                "{answer}"
            );
        }
        let two_keys = match_action("key", &listed).unwrap_err();
        assert!(two_keys.contains("kind of action"), "{two_keys}");
    }

    #[test]
    fn another_action_two_actions_or_a_number_past_the_list_are_bad_answers() {
        let listed = actions(&["north", "east", "go north"]);
        assert_eq!(
            match_action("northeast", &listed),
            Err("names no listed action".to_owned())
        );
        assert_eq!(
            match_action("I would rather dance.", &listed),
            Err("names no listed action".to_owned())
        );
        assert!(match_action("4", &listed).is_err());
        let both = match_action("north or east?", &listed).unwrap_err();
        assert!(both.contains("more than one"), "{both}");
        // `go north` holds `north`: naming it is one action, not two.
        assert_eq!(
            match_action("Let's go north!", &listed).as_deref(),
            Ok("go north")
        );
        // A game whose actions are numbers: the number is the action.
        let menu = actions(&["2", "1"]);
        assert_eq!(match_action("1", &menu).as_deref(), Ok("1"));
    }

    #[test]
    fn alternatives_are_read_a_line_each_or_from_a_list_on_one_line_and_kept_distinct() {
        let listed = actions(&["north", "east", "west"]);
        assert_eq!(
            pick("1. east\n2. north\n3. east\n4. west", &listed, 3),
            Ok(actions(&["east", "north", "west"]))
        );
        assert_eq!(pick("fly\nwest", &listed, 3), Ok(actions(&["west"])));
        assert_eq!(
            pick("north, east, west", &listed, 3),
            Ok(actions(&["north", "east", "west"]))
        );
        assert_eq!(
            pick("east; west; fly", &listed, 3),
            Ok(actions(&["east", "west"]))
        );
        assert_eq!(
            pick("{\"actions\": [\"west\", \"west\", \"north\"]}", &listed, 3),
            Ok(actions(&["west", "north"]))
        );
        assert!(pick("fly\nswim", &listed, 3).is_err());
    }
}
