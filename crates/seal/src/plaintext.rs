//! A heap buffer that holds (or held) plaintext, wiped when dropped.
//!
//! `zeroize::Zeroizing<Vec<u8>>` wipes a vector element by element, one
//! volatile byte write each: about a byte per cycle, which made wiping an
//! opened megabyte cost a third of its decryption. This wipes the whole
//! allocation at once with zeroize's bulk fill (a memset the compiler cannot
//! remove, held by an optimization barrier).

use std::ops::{Deref, DerefMut};

use zeroize::Zeroize;

/// A `Vec<u8>` whose whole allocation is zeroed on drop. Growing it past its
/// capacity would leave a copy behind: callers reserve what they need first.
#[derive(Default)]
pub struct Plaintext(Vec<u8>);

impl Plaintext {
    /// An empty buffer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Plaintext(Vec::with_capacity(capacity))
    }

    /// A buffer holding a copy of `bytes`, with `spare` bytes of room after.
    pub fn copy_of(bytes: &[u8], spare: usize) -> Self {
        let mut out = Self::with_capacity(bytes.len() + spare);
        out.0.extend_from_slice(bytes);
        out
    }

    /// The bytes, leaving this buffer empty (for bytes that are no longer
    /// secret, such as the ciphertext the buffer was encrypted into).
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0)
    }
}

impl Deref for Plaintext {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl DerefMut for Plaintext {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

impl Plaintext {
    /// Zeroes the whole allocation and empties the buffer.
    fn wipe(&mut self) {
        // With the length at zero the spare capacity is the whole
        // allocation, which zeroize fills in one bulk write.
        self.0.clear();
        self.0.spare_capacity_mut().zeroize();
    }
}

impl Drop for Plaintext {
    fn drop(&mut self) {
        self.wipe();
    }
}

impl std::fmt::Debug for Plaintext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Plaintext({} bytes)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wipe_zeroes_the_whole_allocation() {
        let mut buffer = Plaintext::copy_of(b"attack at dawn", 16);
        buffer.extend_from_slice(b"!!");
        let capacity = buffer.capacity();
        buffer.wipe();
        assert_eq!(buffer.capacity(), capacity, "nothing freed or moved");
        let spare = buffer.spare_capacity_mut();
        // SAFETY: the wipe wrote every byte of the allocation.
        let bytes: Vec<u8> = spare.iter().map(|b| unsafe { b.assume_init() }).collect();
        assert_eq!(bytes, vec![0; capacity]);
    }

    #[test]
    fn take_leaves_nothing_to_wipe() {
        let mut buffer = Plaintext::copy_of(b"ciphertext", 0);
        assert_eq!(buffer.take(), b"ciphertext");
        assert!(buffer.is_empty() && buffer.capacity() == 0);
    }
}
