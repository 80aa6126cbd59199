//! Deterministic RNGs for the seal tests: never for real keys.

use std::collections::VecDeque;
use std::convert::Infallible;

use rand_core::{TryCryptoRng, TryRng};
use sha2::{Digest, Sha256};

/// Hands out exactly the given bytes, in order; panics when they run out
/// (so a test notices if the code draws more randomness than expected).
pub struct FixedRng(VecDeque<u8>);

impl FixedRng {
    pub fn new(bytes: &[u8]) -> FixedRng {
        FixedRng(bytes.iter().copied().collect())
    }

    pub fn remaining(&self) -> usize {
        self.0.len()
    }
}

impl TryRng for FixedRng {
    type Error = Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut b = [0u8; 4];
        self.try_fill_bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut b = [0u8; 8];
        self.try_fill_bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for d in dst {
            *d = self.0.pop_front().expect("FixedRng ran out of bytes");
        }
        Ok(())
    }
}

impl TryCryptoRng for FixedRng {}

/// The byte stream SHA-256(label ‖ u64be(0)) ‖ SHA-256(label ‖ u64be(1)) ‖ …
/// — reproducible from the label alone (the golden vectors use it).
pub struct HashRng {
    label: Vec<u8>,
    counter: u64,
    block: [u8; 32],
    used: usize,
}

impl HashRng {
    pub fn new(label: &str) -> HashRng {
        HashRng {
            label: label.as_bytes().to_vec(),
            counter: 0,
            block: [0; 32],
            used: 32,
        }
    }
}

impl TryRng for HashRng {
    type Error = Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut b = [0u8; 4];
        self.try_fill_bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut b = [0u8; 8];
        self.try_fill_bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for d in dst {
            if self.used == 32 {
                let mut h = Sha256::new();
                h.update(&self.label);
                h.update(self.counter.to_be_bytes());
                self.block = h.finalize().into();
                self.counter += 1;
                self.used = 0;
            }
            *d = self.block[self.used];
            self.used += 1;
        }
        Ok(())
    }
}

impl TryCryptoRng for HashRng {}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex to bytes; whitespace and ':' are ignored (so RFC text pastes in).
pub fn unhex(s: &str) -> Vec<u8> {
    let clean: Vec<u8> = s
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b':')
        .collect();
    assert!(clean.len().is_multiple_of(2), "odd hex length");
    clean
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).expect("hex"))
        .collect()
}
