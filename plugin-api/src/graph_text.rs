//! Reading `.rlxmodel` text from a peer safely: rlx-ir 0.2.19's reader
//! recurses once per nesting level of brackets (lists, structs, nested
//! graph bodies) and overflows the stack — aborting the process — on text
//! nested a few thousand deep (20,000 `[` in a few kilobytes; found by the
//! `compile_run` fuzzer). Both sides check the nesting before handing text
//! to rlx-ir.

/// The deepest bracket nesting accepted. Real graphs stay far below it
/// (a Scan body inside a While body inside an If is about a dozen); each
/// level costs the reader a few hundred bytes of stack, so this fits a
/// thread's stack of any size a host would run on.
pub const MAX_NESTING: usize = 256;

/// Refuse `text` whose `(`, `[` or `{` nesting (outside string literals)
/// goes deeper than [`MAX_NESTING`], naming the line.
pub fn check_nesting(text: &str) -> Result<(), String> {
    let (mut depth, mut line) = (0usize, 1usize);
    let mut in_str = false;
    let mut escaped = false;
    for c in text.chars() {
        if c == '\n' {
            line += 1;
        }
        if in_str {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(format!(
                        "line {line}: brackets nested more than {MAX_NESTING} deep"
                    ));
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_bounded() {
        assert!(check_nesting("graph @g { %1 = Op{a: [[1], [2]]} }").is_ok());
        let deep = "[".repeat(MAX_NESTING) + &"]".repeat(MAX_NESTING);
        assert!(check_nesting(&deep).is_ok());
        let deeper = format!("x\n{}", "[".repeat(MAX_NESTING + 1));
        let e = check_nesting(&deeper).unwrap_err();
        assert!(e.contains("line 2") && e.contains("256"), "{e}");
        // Brackets inside strings do not count, escaped quotes included.
        let s = format!("\"{}\\\"{}\"", "[".repeat(1000), "{".repeat(1000));
        assert!(check_nesting(&s).is_ok());
    }
}
