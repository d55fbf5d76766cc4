//! A checkpoint that does not match its config is an error naming the
//! directory and the tensor (or the file and the field), never a panic or
//! a model built on a guess.

use rlx_lm::config::{Arch, Quantization};
use rlx_lm::engine::Model;
use rlx_lm::synth::{self, Precision, Size, Spec};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::path::Path;

fn write(dir: &Path, bits: Option<u32>) {
    synth::write(
        dir,
        &Spec {
            arch: Arch::Llama,
            size: Size::Tiny,
            precision: Precision::F32,
            quantization: bits.map(|bits| Quantization {
                bits,
                group_size: 64,
            }),
            seed: 1,
        },
    )
    .unwrap();
}

/// Rewrite `model.safetensors` with `edit` applied to its tensors.
fn edit(dir: &Path, edit: impl FnOnce(&mut Vec<(String, Dtype, Vec<usize>, Vec<u8>)>)) {
    let file = dir.join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut t: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    edit(&mut t);
    let views: Vec<(String, TensorView)> = t
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, &None, &file).unwrap();
}

fn error(dir: &Path) -> String {
    match Model::load(dir) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.0,
    }
}

#[test]
fn a_missing_tensor_is_named() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), None);
    edit(d.path(), |t| {
        t.retain(|x| x.0 != "model.layers.2.mlp.up_proj.weight")
    });
    let e = error(d.path());
    assert!(
        e.contains("\"model.layers.2.mlp.up_proj.weight\" is missing"),
        "{e}"
    );
}

#[test]
fn a_tensor_of_another_shape_is_named_with_both_shapes() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), None);
    edit(d.path(), |t| {
        let x = t.iter_mut().find(|x| x.0 == "model.norm.weight").unwrap();
        x.2 = vec![64];
        x.3.truncate(64 * 4);
    });
    let e = error(d.path());
    assert!(
        e.contains("\"model.norm.weight\" has shape [64], the config implies [128]"),
        "{e}"
    );
}

#[test]
fn a_tensor_the_config_does_not_have_is_named() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), None);
    edit(d.path(), |t| {
        t.push((
            "model.layers.9.mlp.up_proj.weight".into(),
            Dtype::F32,
            vec![2],
            vec![0; 8],
        ))
    });
    let e = error(d.path());
    assert!(
        e.contains("does not have: model.layers.9.mlp.up_proj.weight"),
        "{e}"
    );
}

#[test]
fn a_config_field_that_disagrees_with_the_tensors_is_caught() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), None);
    let cfg = d.path().join("config.json");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace("\"intermediate_size\": 384", "\"intermediate_size\": 512"),
    )
    .unwrap();
    let e = error(d.path());
    assert!(
        e.contains("gate_proj.weight\" has shape [384, 128], the config implies [512, 128]"),
        "{e}"
    );
}

#[test]
fn packed_layers_must_match_the_quantization_the_config_names() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), Some(4));
    let cfg = d.path().join("config.json");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("\"bits\": 4", "\"bits\": 8")).unwrap();
    let e = error(d.path());
    assert!(e.contains("8-bit groups of 64"), "{e}");
    // No quantization in the config at all: the packed layers are named.
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut m = v.as_object().unwrap().clone();
    m.remove("quantization");
    std::fs::write(&cfg, serde_json::Value::Object(m).to_string()).unwrap();
    let e = error(d.path());
    assert!(
        e.contains(".scales is present but config.json has no \"quantization\""),
        "{e}"
    );
}

#[test]
fn no_weights_or_no_config_is_an_error_naming_the_file() {
    let d = tempfile::tempdir().unwrap();
    let e = error(d.path());
    assert!(e.contains("config.json: cannot read"), "{e}");
    write(d.path(), None);
    std::fs::remove_file(d.path().join("model.safetensors")).unwrap();
    let e = error(d.path());
    assert!(e.contains("cannot read the weights"), "{e}");
    std::fs::write(
        d.path().join("model.safetensors"),
        b"not a safetensors file",
    )
    .unwrap();
    let e = error(d.path());
    assert!(e.contains("cannot read the weights"), "{e}");
}
