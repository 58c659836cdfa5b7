//! `Vector`: a fixed-length array of transactional elements.

use super::DsError;
use crate::stm::{Abort, Access, Op, Stm, StructureId, StructureKind, TObj, Tx};

/// A fixed-length array. Each element is its own transactional object,
/// aligned to a cache line (its lock word and version pointer share no
/// line with a neighbour's), so transactions touching different elements
/// never conflict. Element `i` has object element id `i`.
pub struct Vector<T> {
    structure: StructureId,
    elements: Box<[TObj<T>]>,
}

impl<T: Send + Sync + 'static> Vector<T> {
    /// A vector of `len` elements, element `i` starting as `init(i)`.
    #[track_caller]
    pub fn new(stm: &Stm, name: &str, len: usize, mut init: impl FnMut(usize) -> T) -> Result<Vector<T>, DsError> {
        if len == 0 {
            return Err(DsError::Empty { structure: "Vector", name: name.to_string(), what: "length" });
        }
        let structure = stm.register(StructureKind::Vector, name);
        let elements = (0..len).map(|i| TObj::new(stm, structure, i as u64, init(i))).collect();
        Ok(Vector { structure, elements })
    }

    pub fn structure(&self) -> StructureId {
        self.structure
    }

    pub fn len(&self) -> usize {
        self.elements.len()
    }

    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// Element `index` (panics when out of range, like slice indexing).
    #[track_caller]
    pub fn read<'a>(&'a self, tx: &mut Tx<'a>, index: usize) -> Result<T, Abort>
    where
        T: Clone,
    {
        self.read_with(tx, index, T::clone)
    }

    /// Calls `f` on element `index` without cloning it.
    #[track_caller]
    pub fn read_with<'a, R>(&'a self, tx: &mut Tx<'a>, index: usize, f: impl FnOnce(&T) -> R) -> Result<R, Abort> {
        tx.read_with(&self.elements[index], Access::here(Op::VectorRead, index as u64 + 1), f)
    }

    /// Replaces element `index`.
    #[track_caller]
    pub fn write<'a>(&'a self, tx: &mut Tx<'a>, index: usize, value: T) -> Result<(), Abort> {
        tx.write(&self.elements[index], Access::here(Op::VectorWrite, index as u64 + 1), value)
    }

    /// Read-modify-write of element `index`.
    #[track_caller]
    pub fn update<'a, R>(&'a self, tx: &mut Tx<'a>, index: usize, f: impl FnOnce(&mut T) -> R) -> Result<R, Abort>
    where
        T: Clone,
    {
        tx.update(&self.elements[index], Access::here(Op::VectorWrite, index as u64 + 1), f)
    }

    /// Element `index` outside any transaction (NF exit, tests).
    pub fn get_mut(&mut self, index: usize) -> &mut T {
        self.elements[index].get_mut()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn elements_are_independent_cache_line_aligned_objects() {
        let stm = Stm::new(1).unwrap();
        let mut v = Vector::new(&stm, "v", 4, |i| i as u64 * 10).unwrap();
        let mut w = stm.worker(0).unwrap();
        w.atomically(0, |tx| {
            v.update(tx, 1, |x| *x += 1)?;
            v.write(tx, 3, 7)
        });
        assert_eq!(w.atomically(0, |tx| Ok((v.read(tx, 0)?, v.read(tx, 1)?, v.read(tx, 3)?))), (0, 11, 7));
        drop(w);
        assert_eq!(*v.get_mut(2), 20);
        assert_eq!(std::mem::align_of::<TObj<u64>>(), 64);
        assert!(Vector::new(&stm, "empty", 0, |_| 0u8).is_err());
    }

    #[test]
    fn different_elements_never_conflict() {
        let stm = Stm::new(2).unwrap();
        let v = Vector::new(&stm, "v", 2, |_| 0u64).unwrap();
        let mut a = stm.worker(0).unwrap();
        let mut b = stm.worker(1).unwrap();
        let result = a.try_once(0, |tx| {
            v.update(tx, 0, |x| *x += 1)?;
            b.atomically(0, |btx| v.update(btx, 1, |x| *x += 1));
            Ok(())
        });
        assert!(result.is_ok());
    }
}
