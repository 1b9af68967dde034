//! Changes to a class made by PyO3 that PyO3 has no API for: its vectorcall slot, and
//! attributes served by a C-level getter, a member or a method bound to each object.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::PyTypeInfo;

use super::entry::{fastcall_entry, getter_entry, Entry, FastcallMethod, KeptAttribute};

/// Where `field`, a field of `obj`'s Rust value, lies in the object: bytes from its start
/// (None if it is not inside it).
pub fn offset_in<T, F>(obj: &Bound<'_, T>, field: &F) -> Option<usize> {
    (field as *const F as usize).checked_sub(obj.as_ptr() as usize)
}

/// Switches class `T` to vectorcall, from `obj`, one of its objects, whose entry point field
/// is `entry`: once, as `installed` records (the GIL serialises the callers). The class must
/// have no subclasses (not declared `subclass`), so that every object of it has this layout,
/// and each of its objects must hold a valid [`Entry`] there, set when it is made and never
/// changed (the field's type says so).
pub fn install_vectorcall<T: PyTypeInfo>(
    installed: &AtomicBool,
    obj: &Bound<'_, T>,
    entry: &Entry,
) {
    if installed.load(Ordering::Relaxed) {
        return;
    }
    installed.store(true, Ordering::Relaxed);
    let Some(offset) = offset_in(obj, entry) else {
        return;
    };
    let ty = T::type_object_raw(obj.py());
    // SAFETY: `ty` is the live class object of `obj` (checked below; not a subclass, see
    // above), and the GIL is held, so no other thread reads its slots while they change. Its
    // objects hold a valid `vectorcallfunc` at `offset` (the caller's promise), which is checked
    // to fall inside the object; and the flag is set after the offset, so a reader that sees
    // the flag sees the offset.
    unsafe {
        let size = usize::try_from((*ty).tp_basicsize).unwrap_or(0);
        if offset + std::mem::size_of::<Entry>() > size
            || !std::ptr::eq(ffi::Py_TYPE(obj.as_ptr()), ty)
        {
            return;
        }
        (*ty).tp_vectorcall_offset = offset as ffi::Py_ssize_t;
        (*ty).tp_flags |= ffi::Py_TPFLAGS_HAVE_VECTORCALL;
    }
}

/// Whether calls of class `T`'s objects from Python come by vectorcall.
pub fn has_vectorcall<T: PyTypeInfo>(py: Python<'_>) -> bool {
    let ty = T::type_object_raw(py);
    // SAFETY: reading the flags of a live class object with the GIL held.
    unsafe { (*ty).tp_flags & ffi::Py_TPFLAGS_HAVE_VECTORCALL != 0 }
}

/// Puts `descr` in class `ty`'s attribute dict as `name`, and drops the interpreter's caches
/// of the class's attributes.
///
/// # Safety
/// The GIL is held, `ty` is a live class object, and `descr` a live object.
unsafe fn set_class_attr(
    py: Python<'_>,
    ty: *mut ffi::PyTypeObject,
    name: &CStr,
    descr: &Bound<'_, PyAny>,
) -> PyResult<()> {
    // SAFETY: the caller's contract; a class made by `PyType_FromSpec` has an attribute dict
    // (checked all the same).
    unsafe {
        let dict = (*ty).tp_dict;
        if dict.is_null() {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "boxfall: a class of the module has no attribute dict",
            ));
        }
        if ffi::PyDict_SetItemString(dict, name.as_ptr(), descr.as_ptr()) != 0 {
            return Err(PyErr::fetch(py));
        }
        ffi::PyType_Modified(ty);
    }
    Ok(())
}

/// A method bound to one object of class `T::Slf`, called by `METH_FASTCALL | METH_KEYWORDS`
/// (CPython keeps a pointer to the definition, so it is a `static`).
pub struct Method<T>(ffi::PyMethodDef, PhantomData<T>);

// SAFETY: the definition is never written after it is made, and its pointers are to static
// strings and a function; `T` is only a marker.
unsafe impl<T> Sync for Method<T> {}

impl<T: FastcallMethod> Method<T> {
    /// The method `name` (with `doc`, whose `--` line gives `__text_signature__`), called
    /// through [`FastcallMethod::call`] of `T`.
    pub const fn fastcall(name: &'static CStr, doc: &'static CStr) -> Method<T> {
        Method(
            ffi::PyMethodDef {
                ml_name: name.as_ptr(),
                ml_meth: ffi::PyMethodDefPointer {
                    PyCFunctionFastWithKeywords: fastcall_entry::<T>,
                },
                ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
                ml_doc: doc.as_ptr(),
            },
            PhantomData,
        )
    }

    /// A new builtin method object bound to `slf` (its `__self__`, which it holds).
    pub fn bind<'py>(&'static self, slf: &Bound<'py, T::Slf>) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: the definition is static and never written (CPython only reads a method
        // definition; the pointer is `*mut` for historical reasons); `slf` is a live object,
        // which the new function holds a reference to; the GIL is held. A null result means an
        // exception is set.
        unsafe {
            let def = std::ptr::addr_of!(self.0).cast_mut();
            let f = ffi::PyCFunction_NewEx(def, slf.as_ptr(), std::ptr::null_mut());
            Bound::from_owned_ptr_or_err(slf.py(), f)
        }
    }
}

/// A read-only attribute served by [`KeptAttribute`]'s getter, with no PyO3 wrapper around it.
pub struct Getter(ffi::PyGetSetDef);

// SAFETY: as `Method`: never written after it is made; its pointers are to static strings and
// a function.
unsafe impl Sync for Getter {}

impl Getter {
    /// The attribute `name` (with `doc`) of class `T`, served by `T`'s [`KeptAttribute`].
    pub const fn new<T: KeptAttribute>(name: &'static CStr, doc: &'static CStr) -> Getter {
        Getter(ffi::PyGetSetDef {
            name: name.as_ptr(),
            get: Some(getter_entry::<T>),
            set: None,
            doc: doc.as_ptr(),
            closure: std::ptr::null_mut(),
        })
    }

    /// Puts the getter in class `T` (which the getter was made for) in place of what it had.
    pub fn install<T: KeptAttribute>(&'static self, py: Python<'_>) -> PyResult<()> {
        let ty = T::type_object_raw(py);
        // SAFETY: `ty` is the live class object; the definition is static and only read (the
        // pointer is `*mut` for historical reasons); the GIL is held.
        unsafe {
            let def = std::ptr::addr_of!(self.0).cast_mut();
            let descr = Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewGetSet(ty, def))?;
            set_class_attr(py, ty, CStr::from_ptr(self.0.name), &descr)
        }
    }
}

/// A read-only attribute read by the interpreter straight out of each object, as a member
/// (`Py_T_OBJECT_EX`): CPython 3.11's `LOAD_ATTR` specializes a look-up of one into a type
/// check, a load and an incref (`LOAD_ATTR_SLOT`), where a getter always took the generic
/// look-up. Made once its field's offset is known (read off an object, see
/// [`Member::install`]).
pub struct Member {
    name: &'static CStr,
    doc: &'static CStr,
    def: OnceLock<MemberDef>,
    tried: AtomicBool,
}

struct MemberDef(ffi::PyMemberDef);

// SAFETY: written once (in the `OnceLock`), then only read; its pointers are to static
// strings.
unsafe impl Sync for MemberDef {}
// SAFETY: as above: plain data and pointers to static strings.
unsafe impl Send for MemberDef {}

// The member reads a field of type `Option<Py<PyAny>>` as a `PyObject *` (null when none).
const _: () =
    assert!(std::mem::size_of::<Option<Py<PyAny>>>() == std::mem::size_of::<*mut ffi::PyObject>());

impl Member {
    /// The member `name` (with `doc`), not yet installed.
    pub const fn new(name: &'static CStr, doc: &'static CStr) -> Member {
        Member {
            name,
            doc,
            def: OnceLock::new(),
            tried: AtomicBool::new(false),
        }
    }

    /// Makes class `T`'s attribute the member, once, given `slf`, one of its objects, whose
    /// field at `offset` bytes from its start holds `value` (an `Option<Py<PyAny>>` that
    /// every object of the class has, filled when it is made). The offset is checked against
    /// the object (the field lies within it and holds `value`'s pointer); if the check or the
    /// change fails, the attribute stays as it was. `T` has no subclasses.
    pub fn install<T: PyTypeInfo>(
        &'static self,
        slf: &Bound<'_, T>,
        offset: Option<usize>,
        value: Option<&Bound<'_, PyAny>>,
    ) {
        if self.tried.load(Ordering::Relaxed) {
            return;
        }
        self.tried.store(true, Ordering::Relaxed);
        let py = slf.py();
        let ty = T::type_object_raw(py);
        let (Some(offset), Some(value)) = (offset, value) else {
            return;
        };
        // SAFETY: `ty` is the live class object and `slf` an instance of it (checked); the
        // field is read only once it is known to lie within the object's `tp_basicsize`
        // bytes; the definition lives as long as the process (the descriptor points to it)
        // and is only read; the class is changed with the GIL held, and `PyType_Modified`
        // drops the interpreter's caches of its attributes (and its specialized look-ups,
        // which check the class's version).
        unsafe {
            let size = usize::try_from((*ty).tp_basicsize).unwrap_or(0);
            if !std::ptr::eq(ffi::Py_TYPE(slf.as_ptr()), ty)
                || offset + std::mem::size_of::<*mut ffi::PyObject>() > size
            {
                return;
            }
            let field = slf
                .as_ptr()
                .cast::<u8>()
                .add(offset)
                .cast::<*mut ffi::PyObject>();
            if *field != value.as_ptr() {
                return;
            }
            let Ok(offset) = ffi::Py_ssize_t::try_from(offset) else {
                return;
            };
            let member = self.def.get_or_init(|| {
                MemberDef(ffi::PyMemberDef {
                    name: self.name.as_ptr(),
                    type_code: ffi::Py_T_OBJECT_EX,
                    offset,
                    flags: ffi::Py_READONLY,
                    doc: self.doc.as_ptr(),
                })
            });
            if member.0.offset != offset {
                return;
            }
            let def = std::ptr::addr_of!(member.0).cast_mut();
            let Ok(descr) = Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMember(ty, def))
            else {
                return;
            };
            // A failure leaves the getter, which serves every object all the same.
            drop(set_class_attr(py, ty, self.name, &descr));
        }
    }
}
