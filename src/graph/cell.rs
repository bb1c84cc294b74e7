//! A cell's matrix values, read once at expansion: every axis as written
//! (for its id, `{{ matrix.* }}` and a command's environment), and the
//! axes a play reads typed: its persona, controller, seed and repeat. A
//! play's seed that is not a whole number is refused here, so no step
//! parses one. (A step that does not play may name an axis `seed` and give
//! it any value: it is kept as written, not typed.)

use serde::Serialize;

use crate::plan::kinds::play::REPEAT_AXIS;
use crate::plan::model::Controller;

/// One cell of a matrix step (empty for a step without a matrix).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cell {
    values: Vec<(String, String)>,
    /// The `persona` axis's slug.
    pub persona: Option<String>,
    /// The `controller` axis's.
    pub controller: Option<Controller>,
    /// The `seed` axis's.
    pub seed: Option<i64>,
    /// Which play of a repeated cell (`repeat = N` adds the axis): 1..=N.
    pub repeat: Option<u32>,
}

impl Cell {
    /// The cell of `values` (axis → value, in the order written), or why
    /// a typed axis cannot be read; the axes are typed for a step that
    /// `plays`, and only kept as written for any other.
    pub fn new(values: Vec<(String, String)>, plays: bool) -> Result<Cell, String> {
        let mut cell = Cell::default();
        for (axis, value) in values.iter().filter(|_| plays) {
            match axis.as_str() {
                "persona" => cell.persona = Some(value.clone()),
                "controller" => {
                    cell.controller = Some(Controller::from_name(value).ok_or_else(|| {
                        format!("unknown controller `{value}` (standard, jev, rune)")
                    })?);
                }
                "seed" => {
                    cell.seed =
                        Some(value.parse().map_err(|_| {
                            format!("the matrix seed `{value}` is not a whole number")
                        })?);
                }
                REPEAT_AXIS => {
                    cell.repeat = Some(
                        value
                            .parse()
                            .map_err(|_| format!("the repeat `{value}` is not a whole number"))?,
                    );
                }
                _ => {}
            }
        }
        cell.values = values;
        Ok(cell)
    }

    /// Every axis and its value, in the order written.
    pub fn values(&self) -> &[(String, String)] {
        &self.values
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The axes but `axis` (a repeated cell's own cell, without its play).
    pub fn without(&self, axis: &str) -> Vec<(String, String)> {
        let rest = self.values.iter().filter(|(name, _)| name != axis);
        rest.cloned().collect()
    }
}

/// Written as its axes (`plan explain --json`, a command's `cell`).
impl Serialize for Cell {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.values.serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(values: &[(&str, &str)]) -> Result<Cell, String> {
        let values = values
            .iter()
            .map(|(a, v)| ((*a).to_owned(), (*v).to_owned()));
        Cell::new(values.collect(), true)
    }

    #[test]
    fn the_play_axes_are_typed_and_the_rest_kept_as_written() {
        let c = cell(&[
            ("persona", "kid"),
            ("level", "3"),
            ("controller", "jev"),
            ("seed", "-7"),
            ("repeat", "2"),
        ])
        .expect("a cell");
        assert_eq!(c.persona.as_deref(), Some("kid"));
        assert_eq!(c.controller, Some(Controller::Jev));
        assert_eq!((c.seed, c.repeat), (Some(-7), Some(2)));
        assert_eq!(c.values().len(), 5);
        assert_eq!(c.without("repeat").len(), 4);
        assert_eq!(
            serde_json::to_value(&c).expect("json")[1],
            serde_json::json!(["level", "3"])
        );
    }

    #[test]
    fn a_seed_that_is_not_a_whole_number_is_refused_naming_it() {
        let e = cell(&[("seed", "one")]).expect_err("refused");
        assert!(e.contains("`one` is not a whole number"), "{e}");
        let e = cell(&[("controller", "boss")]).expect_err("refused");
        assert!(e.contains("unknown controller `boss`"), "{e}");
    }

    #[test]
    fn a_step_that_does_not_play_keeps_its_seed_as_written() {
        let values = vec![("seed".to_owned(), "a=b".to_owned())];
        let c = Cell::new(values, false).expect("any value");
        assert_eq!((c.seed, c.values()[0].1.as_str()), (None, "a=b"));
    }
}
