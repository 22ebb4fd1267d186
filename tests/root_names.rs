//! The crate root of `mcp-tasks-runtime` holds what every tool author types,
//! and no more than 30 names: the rest lives in families (`durable`,
//! `question`, `tool`, `engine`, `store`, `mcp`, …).
//!
//! Counted from the source, across every feature: each `pub` item of
//! `src/lib.rs` (modules included, `#[doc(hidden)]` ones too) and each name a
//! `pub use` brings in. A name counts once, whatever namespaces it fills (the
//! `Elicit` trait and its derive are one name to a user).

use std::collections::BTreeSet;

use syn::{Item, UseTree, Visibility};

/// The most names the root may hold.
const MOST: usize = 30;

/// Collects the names a `pub use` tree brings into scope.
fn used(tree: &UseTree, names: &mut BTreeSet<String>) {
    match tree {
        UseTree::Path(p) => used(&p.tree, names),
        UseTree::Name(n) => {
            names.insert(n.ident.to_string());
        }
        UseTree::Rename(r) => {
            names.insert(r.rename.to_string());
        }
        UseTree::Glob(_) => panic!("a glob re-export at the crate root cannot be counted"),
        UseTree::Group(g) => g.items.iter().for_each(|t| used(t, names)),
    }
}

/// The public names of the crate root, as `src/lib.rs` declares them.
fn root_names() -> BTreeSet<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../mcp-tasks-runtime/src/lib.rs"
    );
    let source = std::fs::read_to_string(path).expect("the runtime's lib.rs");
    let file = syn::parse_file(&source).expect("lib.rs parses");
    let mut names = BTreeSet::new();
    for item in &file.items {
        let (vis, ident) = match item {
            Item::Use(u) => {
                if matches!(u.vis, Visibility::Public(_)) {
                    used(&u.tree, &mut names);
                }
                continue;
            }
            Item::Mod(i) => (&i.vis, &i.ident),
            Item::Fn(i) => (&i.vis, &i.sig.ident),
            Item::Struct(i) => (&i.vis, &i.ident),
            Item::Enum(i) => (&i.vis, &i.ident),
            Item::Union(i) => (&i.vis, &i.ident),
            Item::Trait(i) => (&i.vis, &i.ident),
            Item::Type(i) => (&i.vis, &i.ident),
            Item::Const(i) => (&i.vis, &i.ident),
            Item::Static(i) => (&i.vis, &i.ident),
            Item::Macro(i) => {
                // `macro_rules!` marked `#[macro_export]` lands at the root.
                let exported = i.attrs.iter().any(|a| a.path().is_ident("macro_export"));
                if exported && let Some(ident) = &i.ident {
                    names.insert(ident.to_string());
                }
                continue;
            }
            _ => continue,
        };
        if matches!(vis, Visibility::Public(_)) {
            names.insert(ident.to_string());
        }
    }
    names
}

#[test]
fn the_crate_root_holds_at_most_30_names() {
    let names = root_names();
    assert!(
        names.len() <= MOST,
        "the crate root has {} public names, more than {MOST}: {names:?}; put the new ones in \
         the module of their family",
        names.len(),
    );
}

#[test]
fn the_durable_vocabulary_is_not_at_the_root() {
    // The names tokio also uses read the same at a call site: only
    // `durable::sleep(..)` tells the journaled one apart.
    let names = root_names();
    let clashing: Vec<_> = ["sleep", "spawn", "select", "select_all", "now"]
        .into_iter()
        .filter(|n| names.contains(*n))
        .collect();
    assert!(
        clashing.is_empty(),
        "at the crate root: {clashing:?}; they belong in `durable`"
    );
}
