//! `[[steps]]`: each step's kind and parameters, its `needs`, matrix and
//! references, the graph's cycles and the plan's expanded size.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{BUILTIN_POOLS, MAX_EXPANDED_STEPS, Validator};
use crate::plan::decode::Spanned;
use crate::plan::diagnostic::Diagnostic;
use crate::plan::kinds::StepCheck;
use crate::plan::kinds::play::REPEAT_AXIS;
use crate::plan::model::{Axis, Controller, Params, Step};
use crate::plan::raw::{RawAxis, RawMatrix, RawStep};
use crate::plan::source::Span;

/// The steps `step` needs, directly or through others, each once.
pub(super) fn upstream<'a>(
    step: &RawStep,
    all: &'a [RawStep],
) -> impl Iterator<Item = &'a RawStep> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut queue: Vec<&str> = step.needs.iter().map(|n| n.value.as_str()).collect();
    let mut found = Vec::new();
    while let Some(id) = queue.pop() {
        if !seen.insert(id) {
            continue;
        }
        if let Some(up) = all.iter().find(|s| s.id.value == id) {
            queue.extend(up.needs.iter().map(|n| n.value.as_str()));
            found.push(up);
        }
    }
    found.into_iter()
}

pub(in crate::plan) struct Refs<'r> {
    pub(in crate::plan) personas: &'r [&'r str],
    pub(in crate::plan) controllers: &'r [Controller],
    pub(in crate::plan) gates: &'r [&'r str],
    pub(super) pools: &'r BTreeMap<String, u32>,
    /// Sections that could not be read: references into them are not checked.
    pub(super) unreadable: &'r [&'static str],
}

impl Refs<'_> {
    pub(in crate::plan) fn readable(&self, section: &str) -> bool {
        !self.unreadable.contains(&section)
    }
}

impl Validator<'_> {
    /// `unread`: ids of steps that could not be read (already reported),
    /// which a `needs` may name without being called unknown.
    pub(super) fn steps(
        &mut self,
        raw: &[RawStep],
        unread: &[String],
        refs: &Refs<'_>,
    ) -> Vec<Step> {
        let mut ids = self.names(raw.iter().map(|s| &s.id), "step id");
        ids.extend(unread.iter().map(String::as_str));
        // Membership by hash: a 10,000-step plan checks its needs in linear time.
        let id_set: HashSet<&str> = ids.iter().copied().collect();
        let steps: Vec<Step> = raw
            .iter()
            .map(|s| self.step(s, raw, (&ids, &id_set), refs))
            .collect();
        self.cycles(raw);
        if self.diags.is_empty() {
            self.expanded_size(raw, &steps);
        }
        steps
    }

    pub(super) fn step(
        &mut self,
        s: &RawStep,
        all: &[RawStep],
        (ids, id_set): (&[&str], &HashSet<&str>),
        refs: &Refs<'_>,
    ) -> Step {
        let kind = s.kind.value;
        for need in &s.needs {
            if need.value == s.id.value {
                self.push(
                    Diagnostic::new("plan::cycle", format!("step `{}` needs itself", s.id.value))
                        .at(need.span)
                        .label("a step cannot wait for itself"),
                );
            } else if !id_set.contains(need.value.as_str()) {
                self.reference(need, ids, "plan::unknown_needs", "step");
            }
        }
        if let (Some(retries), true) = (&s.retries, kind.moves_money()) {
            self.push(
                Diagnostic::new("plan::retries_on_money_step", format!("`retries` is not allowed on the {} step `{}`", kind.name(), s.id.value))
                    .at(retries.span)
                    .label("money steps are never retried")
                    .help("a retry could charge twice; gameplan replays money requests with the same idempotency key on resume instead. Remove `retries`."),
            );
        }
        let retries = s
            .retries
            .as_ref()
            .map_or(0, |r| u32::try_from(r.value).unwrap_or(u32::MAX));
        if let (Some(pool), true) = (&s.pool, refs.readable("pools")) {
            let mut known: Vec<&str> = BUILTIN_POOLS.to_vec();
            known.extend(refs.pools.keys().map(String::as_str));
            known.sort_unstable();
            known.dedup();
            self.reference(pool, &known, "plan::unknown_pool", "pool");
        }

        let matrix = match &s.matrix {
            Some(m) => self.matrix(s, m, refs),
            None => Vec::new(),
        };
        if let Some(per) = &s.per {
            if s.matrix.is_some() {
                self.push(
                    Diagnostic::new("plan::conflicting_keys", format!("step `{}` has both `matrix` and `per`", s.id.value))
                        .at(per.span)
                        .help("`per` repeats a step once per cell of another step's matrix; a step has one or the other"),
                );
            }
            match all.iter().find(|o| o.id.value == per.value) {
                Some(target) if target.matrix.is_none() && !repeats(target) => self.push(
                    Diagnostic::new("plan::per_not_matrix", format!("`per` names step `{}`, which has no matrix", per.value))
                        .at(per.span)
                        .label("not a matrix step")
                        .help("`per` gives one instance per cell of a matrix step; give that step a `matrix`, or use `needs`"),
                ),
                Some(_) => {}
                None => {
                    self.reference(per, ids, "plan::unknown_needs", "step");
                }
            }
        }

        let params = Params::check(
            &s.params,
            &mut StepCheck {
                v: self,
                step: s,
                all,
                refs,
            },
        );
        let mut matrix = matrix;
        if let Params::Play(play) = &params
            && let Some(n) = play.repeat.filter(|&n| n > 1)
        {
            // Last, so a repeat's id reads `play[kid,jev,2]` after its cell's.
            matrix.push(Axis {
                name: REPEAT_AXIS.to_owned(),
                values: (1..=n).map(|k| k.to_string()).collect(),
            });
        }
        Step {
            id: s.id.value.clone(),
            kind,
            needs: s.needs.iter().map(|n| n.value.clone()).collect(),
            matrix,
            per: s.per.as_ref().map(|p| p.value.clone()),
            always: s.always || kind.row().always,
            pool: s.pool.as_ref().map(|p| p.value.clone()),
            timeout_secs: s.timeout.as_ref().map(|t| t.value),
            retries,
            reuse: s.reuse,
            env: s.env.clone(),
            params,
        }
    }

    pub(in crate::plan) fn controller(
        &mut self,
        name: &Spanned<String>,
        refs: &Refs<'_>,
    ) -> Option<Controller> {
        let names: Vec<&str> = refs.controllers.iter().map(|c| c.name()).collect();
        if !refs.readable("controllers")
            || self.reference(name, &names, "plan::unknown_controller", "controller")
        {
            Controller::from_name(name)
        } else {
            None
        }
    }

    /// Checks one value `v` of the matrix axis `axis` of step `s`.
    fn matrix_value(&mut self, s: &RawStep, axis: &str, v: &Spanned<String>, refs: &Refs<'_>) {
        match axis {
            "persona" if refs.readable("personas") => {
                self.reference(v, refs.personas, "plan::unknown_persona", "persona");
            }
            "controller" => {
                self.controller(v, refs);
            }
            // A command's `seed` axis is any value; a play's is what its
            // game is reset with.
            "seed" if s.kind.value.row().plays && v.value.parse::<i64>().is_err() => {
                let what = v.value.escape_debug();
                self.push(
                    Diagnostic::new(
                        "plan::invalid_value",
                        format!("the matrix seed `{what}` is not a whole number"),
                    )
                    .at(v.span)
                    .label("not a whole number")
                    .help(
                        "a cell's seed is what the game is reset with: list whole numbers, \
                         e.g. `seed = [1, 2]`",
                    ),
                );
            }
            _ => {}
        }
        // Cell ids join values with `,` inside `[...]`: a value holding
        // those characters could make two cells one id.
        if v.value.is_empty()
            || v.value.contains([',', '[', ']'])
            || v.value.chars().any(char::is_control)
        {
            let what = v.value.escape_debug();
            self.push(
                Diagnostic::new(
                    "plan::invalid_value",
                    format!("matrix value `{what}` cannot be part of a step id"),
                )
                .at(v.span)
                .label("not allowed in a matrix value")
                .help(
                    "matrix values name cells like `play[kid,jev,1]`: they may not be empty or \
                     hold `,`, `[`, `]` or control characters",
                ),
            );
        }
    }

    pub(super) fn matrix(&mut self, s: &RawStep, m: &RawMatrix, refs: &Refs<'_>) -> Vec<Axis> {
        if m.value.is_empty() {
            self.push(
                Diagnostic::new(
                    "plan::empty_list",
                    format!("step `{}` has an empty matrix", s.id.value),
                )
                .at(m.span)
                .help("a matrix needs at least one axis, e.g. `matrix = { persona = \"*\" }`"),
            );
        }
        let mut axes = Vec::new();
        let mut seen = HashSet::new();
        for (name, axis) in &m.value {
            if !seen.insert(name.value.clone()) {
                continue;
            }
            // `None`: the axis is wrong and already reported.
            let values: Option<Vec<String>> = match axis {
                RawAxis::All(span) => match name.value.as_str() {
                    "persona" => Some(refs.personas.iter().map(|p| (*p).to_owned()).collect()),
                    "controller" => Some(
                        refs.controllers
                            .iter()
                            .map(|c| c.name().to_owned())
                            .collect(),
                    ),
                    other => {
                        self.push(
                            Diagnostic::new("plan::invalid_value", format!("`\"*\"` is not defined for the matrix axis `{other}`"))
                                .at(*span)
                                .label("nothing to expand to")
                                .help("`\"*\"` means every persona (axis `persona`) or every controller (axis `controller`); list this axis's values instead"),
                        );
                        None
                    }
                },
                RawAxis::List(values) => {
                    for v in values {
                        self.matrix_value(s, &name.value, v, refs);
                    }
                    self.unique(
                        values.iter(),
                        &format!("value of matrix axis `{}`", name.value),
                    );
                    Some(values.iter().map(|v| v.value.clone()).collect())
                }
            };
            let Some(values) = values else { continue };
            // `"*"` over personas that could not be read is empty for that reason alone.
            let unreadable_star = matches!(axis, RawAxis::All(_))
                && name.value == "persona"
                && !refs.readable("personas");
            if values.is_empty() && !unreadable_star {
                self.push(
                    Diagnostic::new("plan::empty_list", format!("matrix axis `{}` has no values", name.value))
                        .at(name.span)
                        .label("expands to no cells")
                        .help("a step with an empty axis would never run; list at least one value (or define the personas `\"*\"` stands for)"),
                );
            }
            axes.push(Axis {
                name: name.value.clone(),
                values,
            });
        }
        axes
    }

    /// Reports each dependency cycle once, step by step: `a → b → c → a`.
    pub(super) fn cycles(&mut self, raw: &[RawStep]) {
        // First definition wins, as everywhere else; duplicates are reported apart.
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, s) in raw.iter().enumerate() {
            index.entry(s.id.value.as_str()).or_insert(i);
        }
        // Edges from a step to what it needs (needs and per).
        let deps: Vec<Vec<(usize, Span)>> = raw
            .iter()
            .map(|s| {
                s.needs
                    .iter()
                    .chain(s.per.iter())
                    .filter(|n| n.value != s.id.value)
                    .filter_map(|n| index.get(n.value.as_str()).map(|&i| (i, n.span)))
                    .collect()
            })
            .collect();
        // Iterative DFS with colours; a grey target closes a cycle.
        let mut colour = vec![0u8; raw.len()];
        for start in 0..raw.len() {
            if colour[start] != 0 {
                continue;
            }
            let mut path: Vec<(usize, usize)> = vec![(start, 0)];
            colour[start] = 1;
            while let Some(&mut (node, ref mut next)) = path.last_mut() {
                if let Some(&(dep, span)) = deps[node].get(*next) {
                    *next += 1;
                    match colour[dep] {
                        0 => {
                            colour[dep] = 1;
                            path.push((dep, 0));
                        }
                        1 => {
                            let from = path.iter().position(|(n, _)| *n == dep).unwrap_or(0);
                            let mut names: Vec<&str> = path[from..]
                                .iter()
                                .map(|(n, _)| raw[*n].id.value.as_str())
                                .collect();
                            names.push(&raw[dep].id.value);
                            self.push(
                                Diagnostic::new("plan::cycle", format!("dependency cycle: {}", names.join(" → ")))
                                    .at(span)
                                    .label(format!("`{}` needs `{}`, which leads back here", raw[node].id.value, raw[dep].id.value))
                                    .help("a step cannot (indirectly) wait for itself; remove one of these `needs`"),
                            );
                        }
                        _ => {}
                    }
                } else {
                    colour[node] = 2;
                    path.pop();
                }
            }
        }
    }

    /// Refuses plans that would expand past [`MAX_EXPANDED_STEPS`], by
    /// multiplying matrix sizes, before any instance is allocated.
    pub(super) fn expanded_size(&mut self, raw: &[RawStep], steps: &[Step]) {
        let cells = |step: &Step| -> u64 {
            step.matrix
                .iter()
                .map(|a| a.values.len() as u64)
                .fold(1u64, u64::saturating_mul)
        };
        let mut total: u64 = 0;
        for (r, step) in raw.iter().zip(steps) {
            let n = match &step.per {
                Some(per) => steps.iter().find(|o| &o.id == per).map_or(1, cells),
                None => cells(step),
            };
            total = total.saturating_add(n);
            if total > MAX_EXPANDED_STEPS {
                let at = r.matrix.as_ref().map_or(r.id.span, |m| m.span);
                self.push(
                    Diagnostic::new(
                        "plan::too_many_steps",
                        format!("the plan expands to more than {MAX_EXPANDED_STEPS} steps"),
                    )
                    .at(at)
                    .label(format!("{n} instances of `{}`", step.id))
                    .help("split the plan, or make the matrices smaller"),
                );
                return;
            }
        }
    }
}

/// A play step whose `repeat` makes it a matrix of its own.
fn repeats(step: &RawStep) -> bool {
    matches!(&step.params, crate::plan::kinds::RawParams::Play(p)
        if p.repeat.as_ref().is_some_and(|r| r.value > 1))
}
