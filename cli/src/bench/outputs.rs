//! A child's outputs, handed to the parent in a file for the comparison
//! against the CPU row: the whole tensors, so the error is exact (a
//! checksum would hide offsetting errors, and printing megabytes of JSON
//! would slow every child down).
//!
//! Format: per output, its element count as a little-endian `u64`, then
//! that many little-endian `f32`s.

use std::path::Path;

pub fn write(path: &Path, outputs: &[Vec<f32>]) -> Result<(), String> {
    let total: usize = outputs.iter().map(|o| 8 + 4 * o.len()).sum();
    let mut bytes = Vec::with_capacity(total);
    for o in outputs {
        bytes.extend_from_slice(&(o.len() as u64).to_le_bytes());
        for v in o {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
    }
    std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

pub fn read(path: &Path) -> Result<Vec<Vec<f32>>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let bad = || format!("{} is not an outputs file", path.display());
    let mut rest = bytes.as_slice();
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        let n = usize::try_from(u64::from_le_bytes(*len)).map_err(|_| bad())?;
        let size = n
            .checked_mul(4)
            .filter(|s| *s <= tail.len())
            .ok_or_else(bad)?;
        let (data, tail) = tail.split_at(size);
        out.push(
            data.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        );
        rest = tail;
    }
    Ok(out)
}

/// The sum of every element, in f64.
pub fn checksum(outputs: &[Vec<f32>]) -> f64 {
    outputs.iter().flatten().map(|&v| v as f64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_round_trip_and_truncation_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o");
        let outs = vec![vec![1.0, -2.5, f32::NAN], vec![], vec![7.0]];
        write(&p, &outs).unwrap();
        let back = read(&p).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[0][..2], [1.0, -2.5]);
        assert!(back[0][2].is_nan());
        assert_eq!(back[2], vec![7.0]);
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        assert!(read(&p).is_err());
        assert_eq!(checksum(&[vec![1.0, 2.0], vec![3.0]]), 6.0);
    }
}
