//! The shim's safe wrappers, generated from its cxx bridges.
//!
//! Each MLX function is declared once on the Rust side, in its module's
//! `#[cxx::bridge] mod ffi` (which `cxx_build` has to read as source text,
//! so no macro can stand in for it), and defined once in C++. For every
//! safe, receiver-less bridge function returning `Result<T>`, this writes
//! `pub fn name(args) -> Result<T, ShimError>` with the same arguments and
//! doc comments into `$OUT_DIR/<module>_wrappers.rs`, which the module
//! `include!`s. A function the module defines itself at the top level, or
//! through a macro invoked there (a hand-written wrapper with more to do),
//! is left to it.

use quote::{quote, ToTokens};
use std::collections::HashSet;
use std::path::Path;

/// Writes `$OUT_DIR/<stem>_wrappers.rs` for the bridge in `src`; errors
/// name the op `<op_prefix><name>` (`linalg::solve`).
pub fn generate(src: &Path, op_prefix: &str, out_dir: &Path) {
    let text =
        std::fs::read_to_string(src).unwrap_or_else(|e| panic!("reading {}: {e}", src.display()));
    let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", src.display()));
    let by_hand: HashSet<String> = file
        .items
        .iter()
        .flat_map(|item| match item {
            syn::Item::Fn(f) => vec![f.sig.ident.to_string()],
            // A macro that writes wrappers (`info_strings! { fn name; }`).
            syn::Item::Macro(m) if m.ident.is_none() => fns_named_in(m.mac.tokens.clone()),
            _ => vec![],
        })
        .collect();
    let bridge = file
        .items
        .iter()
        .find_map(|item| match item {
            syn::Item::Mod(m) if m.ident == "ffi" && is_bridge(&m.attrs) => m.content.as_ref(),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{}: no #[cxx::bridge] mod ffi", src.display()));

    let mut out = proc_macro2::TokenStream::new();
    for item in &bridge.1 {
        let syn::Item::ForeignMod(block) = item else {
            continue;
        };
        for f in &block.items {
            let syn::ForeignItem::Fn(f) = f else { continue };
            let sig = &f.sig;
            let name = sig.ident.to_string();
            let Some(ok) = result_type(&sig.output) else {
                continue;
            };
            if sig.unsafety.is_some() || sig.receiver().is_some() || by_hand.contains(&name) {
                continue;
            }
            let docs = f.attrs.iter().filter(|a| a.path().is_ident("doc"));
            let ident = &sig.ident;
            let params = &sig.inputs;
            let args = sig.inputs.iter().map(|a| match a {
                syn::FnArg::Typed(p) => p.pat.to_token_stream(),
                syn::FnArg::Receiver(_) => unreachable!("receivers are skipped above"),
            });
            // `where_` is MLX's `where`: the op is named without the underscore.
            let op = format!("{op_prefix}{}", name.trim_end_matches('_'));
            out.extend(quote! {
                #(#docs)*
                pub fn #ident(#params) -> ::std::result::Result<#ok, crate::ShimError> {
                    ffi::#ident(#(#args),*).map_err(|e| crate::ShimError::new(#op, e))
                }
            });
        }
    }
    let stem = src
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a UTF-8 file name");
    let path = out_dir.join(format!("{stem}_wrappers.rs"));
    std::fs::write(&path, out.to_string())
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// The identifiers after `fn` in a macro invocation's tokens.
fn fns_named_in(tokens: proc_macro2::TokenStream) -> Vec<String> {
    let mut names = Vec::new();
    let mut after_fn = false;
    for t in tokens {
        match t {
            proc_macro2::TokenTree::Ident(i) if after_fn => {
                names.push(i.to_string());
                after_fn = false;
            }
            proc_macro2::TokenTree::Ident(i) => after_fn = i == "fn",
            proc_macro2::TokenTree::Group(g) => {
                names.extend(fns_named_in(g.stream()));
                after_fn = false;
            }
            _ => after_fn = false,
        }
    }
    names
}

fn is_bridge(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let p = a.path();
        p.segments.len() == 2 && p.segments[0].ident == "cxx" && p.segments[1].ident == "bridge"
    })
}

/// `T` of a `-> Result<T>` return type.
fn result_type(output: &syn::ReturnType) -> Option<&syn::Type> {
    let syn::ReturnType::Type(_, ty) = output else {
        return None;
    };
    let syn::Type::Path(p) = &**ty else {
        return None;
    };
    let last = p.path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.first()? {
        syn::GenericArgument::Type(t) => Some(t),
        _ => None,
    }
}
