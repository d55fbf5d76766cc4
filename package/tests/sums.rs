//! `SHA256SUMS`: written in `sha256sum`'s format, read back strictly.

mod common;

use common::{sha256_hex, tempdir};
use rlx_plugin_package::{parse_sums, sha256_file, write_sums};
use std::fs;

#[test]
fn write_then_parse() {
    let tmp = tempdir();
    let b = tmp.path().join("rlx-mlx-0.1.0-macos-arm64.tar.xz");
    let a = tmp.path().join("sub/rlx-mlx-0.1.0-linux-x86_64.tar.xz");
    fs::create_dir_all(a.parent().unwrap()).unwrap();
    fs::write(&a, b"archive a").unwrap();
    fs::write(&b, b"archive b").unwrap();
    let out = tmp.path().join("release");
    fs::create_dir(&out).unwrap();

    let sums_path = write_sums(&out, &[b.clone(), a.clone()]).unwrap();
    assert_eq!(sums_path, out.join("SHA256SUMS"));
    let text = fs::read_to_string(&sums_path).unwrap();
    assert_eq!(
        text,
        format!(
            "{}  rlx-mlx-0.1.0-linux-x86_64.tar.xz\n{}  rlx-mlx-0.1.0-macos-arm64.tar.xz\n",
            sha256_hex(b"archive a"),
            sha256_hex(b"archive b")
        )
    );
    let sums = parse_sums(&text).unwrap();
    assert_eq!(sums.len(), 2);
    assert_eq!(
        sums["rlx-mlx-0.1.0-linux-x86_64.tar.xz"],
        sha256_file(&a).unwrap()
    );
    assert_eq!(
        sums["rlx-mlx-0.1.0-macos-arm64.tar.xz"],
        sha256_file(&b).unwrap()
    );
}

#[test]
fn same_name_twice_is_refused() {
    let tmp = tempdir();
    let a = tmp.path().join("x/a.tar.xz");
    let b = tmp.path().join("y/a.tar.xz");
    for p in [&a, &b] {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, b"data").unwrap();
    }
    assert!(write_sums(tmp.path(), &[a, b]).is_err());
}

#[test]
fn binary_marker_and_upper_case_are_read() {
    let hex = sha256_hex(b"x");
    let sums = parse_sums(&format!("{} *a.tar.xz\r\n", hex.to_uppercase())).unwrap();
    assert_eq!(sums["a.tar.xz"], hex);
}

#[test]
fn malformed_lines_are_refused() {
    let hex = sha256_hex(b"x");
    let bad = [
        format!("{hex} a.tar.xz\n"),                     // one space
        format!("{hex}a.tar.xz\n"),                      // no space
        format!("{}  a.tar.xz\n", &hex[..63]),           // short hash
        format!("{}g  a.tar.xz\n", &hex[..63]),          // not hex
        format!("{hex}  \n"),                            // no name
        format!("{hex}  ../a.tar.xz\n"),                 // a path
        format!("{hex}  a.tar.xz\n{hex}  a.tar.xz\n"),   // twice
        format!("{hex}  a.tar.xz\n\n{hex}  b.tar.xz\n"), // blank line
        "garbage\n".to_string(),
    ];
    for text in bad {
        let err = parse_sums(&text).expect_err(&text).to_string();
        assert!(err.contains("SHA256SUMS line"), "{err}");
    }
}
