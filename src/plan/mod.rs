//! The plan language: source text, the spanned tree, decoding, validation and the validated model.
//!
//! Owns everything from a plan file's bytes to [`model::Plan`], and the
//! `dispositions.toml` beside it ([`dispositions`]); knows nothing of
//! running steps or money. Entry point: [`load()`].

pub mod decode;
pub mod diagnostic;
pub mod dispositions;
pub mod kinds;
pub mod load;
pub mod model;
pub mod node;
pub mod page;
pub mod raw;
pub mod schema;
pub mod source;
pub mod validate;

pub use load::{LoadFailure, LoadOptions, LoadedPlan, UnsetSecret, find_root, load};

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::{LoadOptions, load};

    /// Plan files under `dir`, recursively, sorted.
    fn plan_files(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return out;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(plan_files(&path));
            } else if super::source::Format::from_path(&path).is_some() {
                out.push(path);
            }
        }
        out.sort();
        out
    }

    #[test]
    fn every_checked_in_plan_loads() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let files: Vec<PathBuf> = [root.join("plans"), root.join("examples/plans")]
            .iter()
            .flat_map(|d| plan_files(d))
            .collect();
        assert!(
            files.len() >= 3,
            "expected the demo and review plans, found {files:?}"
        );
        let options = LoadOptions {
            root: Some(root.to_path_buf()),
            ..LoadOptions::default()
        };
        for file in files {
            let loaded = load(&file, &options);
            assert!(
                loaded.is_ok(),
                "{} does not load: {:?}",
                file.display(),
                loaded.err().map(|f| f.diagnostics)
            );
            crate::graph::expand(&loaded.unwrap().plan).expect("expands");
        }
    }

    #[test]
    fn demo_toml_and_yaml_are_the_same_plan() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let options = LoadOptions {
            root: Some(root.to_path_buf()),
            ..LoadOptions::default()
        };
        let toml = load(&root.join("plans/demo.toml"), &options).expect("demo.toml loads");
        let yaml = load(&root.join("plans/demo.yaml"), &options).expect("demo.yaml loads");
        assert_eq!(toml.plan, yaml.plan);
    }
}
