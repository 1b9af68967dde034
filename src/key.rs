//! Dispatch keys, key sets, the key registry and the thread-local include/exclude sets.
//!
//! A key is a bit position in a `u64`; the bit position is its priority. Bit 0 is the alias key
//! `CompositeImplicit`, which never appears in a call's key set. Backend keys take bits 1..=46
//! (CPU lowest, then Native, then backends in registration order), functionality keys bits
//! 47..=63 (in registration order), so every functionality key ranks above every backend key and
//! "the highest key" is one `leading_zeros`.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use crate::error::{Error, Result};

/// The first bit of the functionality keys: the bits below it are the alias and backend keys
/// (CPU and Native among them), the 17 from it functionality keys; backends are the more
/// numerous kind (a test suite registers dozens: boxfall's own Python suite 42).
const FIRST_FUNCTIONALITY: u8 = 47;
/// One past the last bit of the backend keys.
const END_BACKENDS: u8 = FIRST_FUNCTIONALITY;
/// PyTorch's name of the alias key boxfall calls `CompositeImplicit`.
const COMPOSITE_IMPLICIT_AUTOGRAD: &str = "CompositeImplicitAutograd";
/// How many keys a set can hold.
///
/// ```
/// use boxfall::{key::NUM_KEYS, DispatchKey};
/// assert_eq!(NUM_KEYS, 64);
/// assert!(DispatchKey::from_index(NUM_KEYS - 1).is_some());
/// assert!(DispatchKey::from_index(NUM_KEYS).is_none());
/// ```
pub const NUM_KEYS: usize = 64;

/// One dispatch key: a backend (`CPU`, `Native`, `Accel`), a functionality (`Trace`) or the alias
/// key `CompositeImplicit`.
///
/// ```
/// use boxfall::DispatchKey;
/// assert!(DispatchKey::NATIVE > DispatchKey::CPU);
/// assert_eq!(DispatchKey::CPU.name(), "CPU");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct DispatchKey(u8);

/// What a key stands for.
///
/// ```
/// use boxfall::{DispatchKey, KeyKind};
/// assert_eq!(DispatchKey::CPU.kind(), KeyKind::Backend);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum KeyKind {
    /// A device: tensors carry it.
    Backend,
    /// A functionality above every backend (tracing, profiling), reached through the
    /// thread-local included set.
    Functionality,
    /// `CompositeImplicit`: a kernel that serves every backend key lacking its own.
    Alias,
}

impl DispatchKey {
    /// The alias key whose kernel decomposes an operator into others.
    ///
    /// ```
    /// use boxfall::DispatchKey;
    /// assert_eq!(DispatchKey::COMPOSITE_IMPLICIT.index(), 0);
    /// assert!(!DispatchKey::COMPOSITE_IMPLICIT.is_backend());
    /// ```
    pub const COMPOSITE_IMPLICIT: DispatchKey = DispatchKey(0);
    /// The host CPU, lowest of all backends.
    ///
    /// ```
    /// use boxfall::{key::registered_keys, DispatchKey};
    /// assert_eq!(DispatchKey::from_name("CPU").unwrap(), DispatchKey::CPU);
    /// assert!(registered_keys().into_iter().filter(|k| k.is_backend()).all(|k| k >= DispatchKey::CPU));
    /// ```
    pub const CPU: DispatchKey = DispatchKey(1);
    /// The built-in Rust backend (host memory owned by Rust).
    ///
    /// ```
    /// use boxfall::DispatchKey;
    /// assert_eq!(DispatchKey::NATIVE.name(), "Native");
    /// assert!(DispatchKey::NATIVE.is_backend() && DispatchKey::NATIVE > DispatchKey::CPU);
    /// ```
    pub const NATIVE: DispatchKey = DispatchKey(2);

    /// The key's bit position, which is also its table index.
    ///
    /// ```
    /// assert_eq!(boxfall::DispatchKey::CPU.index(), 1);
    /// ```
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// The key at a bit position, if that position is in range.
    ///
    /// ```
    /// use boxfall::DispatchKey;
    /// assert_eq!(DispatchKey::from_index(1), Some(DispatchKey::CPU));
    /// assert_eq!(DispatchKey::from_index(64), None);
    /// ```
    pub const fn from_index(index: usize) -> Option<DispatchKey> {
        if index < NUM_KEYS {
            Some(DispatchKey(index as u8))
        } else {
            None
        }
    }

    /// Backend, functionality or alias.
    ///
    /// ```
    /// use boxfall::{DispatchKey, KeyKind};
    /// assert_eq!(DispatchKey::COMPOSITE_IMPLICIT.kind(), KeyKind::Alias);
    /// ```
    pub const fn kind(self) -> KeyKind {
        if self.0 == 0 {
            KeyKind::Alias
        } else if self.0 < END_BACKENDS {
            KeyKind::Backend
        } else {
            KeyKind::Functionality
        }
    }

    /// Whether this is a backend key.
    ///
    /// ```
    /// assert!(boxfall::DispatchKey::NATIVE.is_backend());
    /// ```
    pub const fn is_backend(self) -> bool {
        matches!(self.kind(), KeyKind::Backend)
    }

    /// The key's registered name (`"<unregistered key N>"`, N its bit, for a position nobody
    /// registered: a key set can be made of any bits).
    ///
    /// ```
    /// use boxfall::DispatchKey;
    /// assert_eq!(DispatchKey::COMPOSITE_IMPLICIT.name(), "CompositeImplicit");
    /// assert_eq!(DispatchKey::from_index(31).unwrap().name(), "<unregistered key 31>");
    /// ```
    pub fn name(self) -> String {
        let reg = registry_read();
        reg.names[self.index()]
            .clone()
            .unwrap_or_else(|| format!("<unregistered key {}>", self.0))
    }

    /// Looks a key up by name, as a torch.library user writes it: the exact name, else the one
    /// key whose name matches ignoring ASCII case (`"cpu"`, `"accel"`), and
    /// `"CompositeImplicitAutograd"` (PyTorch's name) for `CompositeImplicit`. An unknown name,
    /// or one that matches two keys ignoring case, is an error that lists every known key.
    ///
    /// ```
    /// use boxfall::DispatchKey;
    /// assert_eq!(DispatchKey::from_name("Native").unwrap(), DispatchKey::NATIVE);
    /// assert_eq!(DispatchKey::from_name("cpu").unwrap(), DispatchKey::CPU);
    /// assert_eq!(
    ///     DispatchKey::from_name("CompositeImplicitAutograd").unwrap(),
    ///     DispatchKey::COMPOSITE_IMPLICIT
    /// );
    /// assert!(DispatchKey::from_name("Nope").is_err());
    /// ```
    pub fn from_name(name: &str) -> Result<DispatchKey> {
        let reg = registry_read();
        if let Some(k) = reg.find(name) {
            return Ok(k);
        }
        let name_or_alias = if name.eq_ignore_ascii_case(COMPOSITE_IMPLICIT_AUTOGRAD) {
            "CompositeImplicit"
        } else {
            name
        };
        let mut matches = reg.names.iter().enumerate().filter(|(_, n)| {
            n.as_deref()
                .is_some_and(|n| n.eq_ignore_ascii_case(name_or_alias))
        });
        match (matches.next(), matches.next()) {
            (Some((i, _)), None) => Ok(DispatchKey(i as u8)),
            _ => Err(Error::UnknownKey {
                name: name.to_string(),
                known: reg.known(),
            }),
        }
    }

    /// Looks a key up by its exact name only (no case folding, no alias): for registration,
    /// where `"accel"` must not stand for a backend registered as `"Accel"`.
    pub(crate) fn from_exact_name(name: &str) -> Option<DispatchKey> {
        registry_read().find(name)
    }

    /// Looks a key up ignoring ASCII case (how a `Device` argument names its backend).
    ///
    /// ```
    /// use boxfall::DispatchKey;
    /// assert_eq!(DispatchKey::from_name_ignore_case("cpu"), Some(DispatchKey::CPU));
    /// ```
    pub fn from_name_ignore_case(name: &str) -> Option<DispatchKey> {
        let reg = registry_read();
        reg.names.iter().enumerate().find_map(|(i, n)| {
            n.as_deref()
                .filter(|n| n.eq_ignore_ascii_case(name))
                .map(|_| DispatchKey(i as u8))
        })
    }

    /// The key set holding only this key.
    ///
    /// ```
    /// use boxfall::DispatchKey;
    /// assert_eq!(DispatchKey::CPU.set().highest(), Some(DispatchKey::CPU));
    /// ```
    #[inline]
    pub const fn set(self) -> DispatchKeySet {
        DispatchKeySet(1u64 << self.0)
    }
}

impl fmt::Display for DispatchKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A set of dispatch keys: one `u64`, highest bit first.
///
/// ```
/// use boxfall::{DispatchKey, DispatchKeySet};
/// let s = DispatchKeySet::EMPTY | DispatchKey::CPU | DispatchKey::NATIVE;
/// assert_eq!(s.highest(), Some(DispatchKey::NATIVE));
/// assert_eq!(s.without_highest().highest(), Some(DispatchKey::CPU));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DispatchKeySet(pub u64);

impl DispatchKeySet {
    /// No keys.
    ///
    /// ```
    /// use boxfall::DispatchKeySet;
    /// assert_eq!(DispatchKeySet::EMPTY, DispatchKeySet::default());
    /// assert_eq!(DispatchKeySet::EMPTY.iter().count(), 0);
    /// ```
    pub const EMPTY: DispatchKeySet = DispatchKeySet(0);

    /// The highest-priority key, if any.
    ///
    /// ```
    /// assert_eq!(boxfall::DispatchKeySet::EMPTY.highest(), None);
    /// ```
    #[inline]
    pub const fn highest(self) -> Option<DispatchKey> {
        if self.0 == 0 {
            None
        } else {
            Some(DispatchKey(63 - self.0.leading_zeros() as u8))
        }
    }

    /// The set minus its highest key: what a redispatch continues with.
    ///
    /// ```
    /// use boxfall::DispatchKey;
    /// assert!(DispatchKey::CPU.set().without_highest().is_empty());
    /// ```
    #[inline]
    pub const fn without_highest(self) -> DispatchKeySet {
        match self.highest() {
            Some(k) => DispatchKeySet(self.0 & !(1u64 << k.0)),
            None => self,
        }
    }

    /// Whether the set holds `key`.
    ///
    /// ```
    /// use boxfall::DispatchKey;
    /// assert!(DispatchKey::CPU.set().contains(DispatchKey::CPU));
    /// ```
    #[inline]
    pub const fn contains(self, key: DispatchKey) -> bool {
        self.0 & (1u64 << key.0) != 0
    }

    /// Whether the set is empty.
    ///
    /// ```
    /// assert!(boxfall::DispatchKeySet::EMPTY.is_empty());
    /// ```
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The keys, highest first.
    ///
    /// ```
    /// use boxfall::DispatchKey;
    /// let s = DispatchKey::CPU.set() | DispatchKey::NATIVE;
    /// assert_eq!(s.iter().collect::<Vec<_>>(), vec![DispatchKey::NATIVE, DispatchKey::CPU]);
    /// ```
    pub fn iter(self) -> impl Iterator<Item = DispatchKey> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            let k = DispatchKeySet(bits).highest()?;
            bits &= !(1u64 << k.0);
            Some(k)
        })
    }

    /// The keys' names, highest first.
    ///
    /// ```
    /// assert_eq!(boxfall::DispatchKey::CPU.set().names(), vec!["CPU".to_string()]);
    /// ```
    pub fn names(self) -> Vec<String> {
        self.iter().map(|k| k.name()).collect()
    }
}

impl std::ops::BitOr for DispatchKeySet {
    type Output = DispatchKeySet;
    #[inline]
    fn bitor(self, rhs: DispatchKeySet) -> DispatchKeySet {
        DispatchKeySet(self.0 | rhs.0)
    }
}

impl std::ops::BitOr<DispatchKey> for DispatchKeySet {
    type Output = DispatchKeySet;
    #[inline]
    fn bitor(self, rhs: DispatchKey) -> DispatchKeySet {
        DispatchKeySet(self.0 | (1u64 << rhs.0))
    }
}

impl std::ops::BitOrAssign<DispatchKey> for DispatchKeySet {
    #[inline]
    fn bitor_assign(&mut self, rhs: DispatchKey) {
        self.0 |= 1u64 << rhs.0;
    }
}

impl fmt::Debug for DispatchKeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DispatchKeySet({})", self.names().join(", "))
    }
}

impl fmt::Display for DispatchKeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}]", self.names().join(", "))
    }
}

struct KeyRegistry {
    names: [Option<String>; NUM_KEYS],
    next_backend: u8,
    next_functionality: u8,
}

impl KeyRegistry {
    fn find(&self, name: &str) -> Option<DispatchKey> {
        self.names
            .iter()
            .position(|n| n.as_deref() == Some(name))
            .map(|i| DispatchKey(i as u8))
    }

    fn known(&self) -> Vec<String> {
        self.names.iter().flatten().cloned().collect()
    }
}

static KEYS: RwLock<KeyRegistry> = RwLock::new(KeyRegistry {
    names: [const { None }; NUM_KEYS],
    next_backend: 3,
    next_functionality: FIRST_FUNCTIONALITY,
});

fn registry_read() -> std::sync::RwLockReadGuard<'static, KeyRegistry> {
    let mut guard = KEYS.read().unwrap_or_else(|e| e.into_inner());
    if guard.names[1].is_none() {
        drop(guard);
        seed_builtin_keys();
        guard = KEYS.read().unwrap_or_else(|e| e.into_inner());
    }
    guard
}

fn seed_builtin_keys() {
    let mut reg = KEYS.write().unwrap_or_else(|e| e.into_inner());
    if reg.names[1].is_none() {
        reg.names[0] = Some("CompositeImplicit".into());
        reg.names[1] = Some("CPU".into());
        reg.names[2] = Some("Native".into());
    }
}

fn register_key(name: &str, kind: KeyKind) -> Result<DispatchKey> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(Error::Registration(format!(
            "'{name}' is not a valid key name: use letters, digits and '_'"
        )));
    }
    seed_builtin_keys();
    let mut reg = KEYS.write().unwrap_or_else(|e| e.into_inner());
    if reg.find(name).is_some()
        || reg
            .names
            .iter()
            .flatten()
            .any(|n| n.eq_ignore_ascii_case(name))
    {
        return Err(Error::Registration(format!(
            "dispatch key '{name}' is already registered"
        )));
    }
    let (slot, end) = match kind {
        KeyKind::Backend => (&mut reg.next_backend, END_BACKENDS),
        _ => (&mut reg.next_functionality, NUM_KEYS as u8),
    };
    if *slot >= end {
        return Err(Error::Registration(format!(
            "cannot register '{name}': every {kind:?} key slot is taken"
        )));
    }
    let key = DispatchKey(*slot);
    *slot += 1;
    reg.names[key.index()] = Some(name.to_string());
    Ok(key)
}

/// Registers a new backend key; it ranks above every backend registered before it.
///
/// ```
/// let k = boxfall::key::register_backend_key("DocBackendKey").unwrap();
/// assert!(k > boxfall::DispatchKey::NATIVE);
/// assert!(boxfall::key::register_backend_key("DocBackendKey").is_err());
/// ```
pub fn register_backend_key(name: &str) -> Result<DispatchKey> {
    register_key(name, KeyKind::Backend)
}

/// Registers a new functionality key; it ranks above every backend key.
///
/// ```
/// let k = boxfall::key::register_functionality_key("DocTraceKey").unwrap();
/// assert_eq!(k.kind(), boxfall::KeyKind::Functionality);
/// ```
pub fn register_functionality_key(name: &str) -> Result<DispatchKey> {
    register_key(name, KeyKind::Functionality)
}

/// Backend keys whose tensors carry a functionality key (the bits below the first
/// functionality key) and that functionality key (its bit): one word, so that a call's key set
/// takes it with one relaxed load (`with_carried`). Graph mode's backends carry the `Graph` key
///: c10's tensors hold a key set with their functionality keys; boxfall's
/// tensors hold their device's key only, and the keys it carries are added here.
static CARRIED: AtomicU64 = AtomicU64::new(0);

/// The bits of the backend keys (and of the alias key, which no tensor has).
const BACKEND_BITS: u64 = (1u64 << FIRST_FUNCTIONALITY) - 1;

/// Makes the tensors of `backend` carry `functionality`: every call with one of them among its
/// arguments dispatches on `functionality` too ([`with_carried`]). One functionality key is
/// carried (graph mode's); asking for another is an error.
///
/// ```
/// use boxfall::key::{carry_key, register_backend_key, register_functionality_key, with_carried};
/// let b = register_backend_key("DocCarrier").unwrap();
/// let f = register_functionality_key("DocCarried").unwrap();
/// carry_key(b, f).unwrap();
/// assert!(with_carried(b.set()).contains(f));
/// assert!(!with_carried(boxfall::DispatchKey::CPU.set()).contains(f));
/// ```
pub fn carry_key(backend: DispatchKey, functionality: DispatchKey) -> Result<()> {
    if !backend.is_backend() || functionality.kind() != KeyKind::Functionality {
        return Err(Error::Registration(format!(
            "'{backend}' cannot carry '{functionality}': a backend key carries a functionality key"
        )));
    }
    let now = CARRIED.load(Ordering::Relaxed) & !BACKEND_BITS;
    if now != 0 && now != functionality.set().0 {
        return Err(Error::Registration(format!(
            "'{backend}' cannot carry '{functionality}': tensors carry one functionality key, and it is {}",
            DispatchKeySet(now)
        )));
    }
    CARRIED.fetch_or(backend.set().0 | functionality.set().0, Ordering::Relaxed);
    Ok(())
}

/// `keys` with the functionality key their backend keys carry ([`carry_key`]) added.
///
/// ```
/// let cpu = boxfall::DispatchKey::CPU.set();
/// assert_eq!(boxfall::key::with_carried(cpu), cpu); // the CPU carries nothing
/// ```
#[inline(always)]
pub fn with_carried(keys: DispatchKeySet) -> DispatchKeySet {
    let carried = CARRIED.load(Ordering::Relaxed);
    if keys.0 & carried & BACKEND_BITS != 0 {
        DispatchKeySet(keys.0 | (carried & !BACKEND_BITS))
    } else {
        keys
    }
}

/// Every key registered now, lowest priority first.
///
/// ```
/// let keys = boxfall::key::registered_keys();
/// assert_eq!(keys[1], boxfall::DispatchKey::CPU);
/// ```
pub fn registered_keys() -> Vec<DispatchKey> {
    let reg = registry_read();
    (0..NUM_KEYS)
        .filter(|&i| reg.names[i].is_some())
        .map(|i| DispatchKey(i as u8))
        .collect()
}

thread_local! {
    static LOCAL_KEYS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// This thread's included and excluded keys.
///
/// ```
/// let (inc, exc) = boxfall::key::local_keys();
/// assert!(inc.is_empty() && exc.is_empty());
/// ```
#[inline(always)]
pub fn local_keys() -> (DispatchKeySet, DispatchKeySet) {
    let (i, e) = LOCAL_KEYS.with(|c| c.get());
    (DispatchKeySet(i), DispatchKeySet(e))
}

/// Adds keys to this thread's included or excluded set until dropped (nestable; the previous
/// sets come back on drop, also when unwinding).
///
/// ```
/// use boxfall::{key::{local_keys, LocalKeysGuard}, DispatchKey};
/// {
///     let _g = LocalKeysGuard::include(DispatchKey::NATIVE.set());
///     assert!(local_keys().0.contains(DispatchKey::NATIVE));
/// }
/// assert!(local_keys().0.is_empty());
/// ```
#[must_use = "the keys are restored when the guard drops"]
pub struct LocalKeysGuard {
    previous: (u64, u64),
}

impl LocalKeysGuard {
    /// Includes `keys` (and takes them out of the excluded set).
    ///
    /// ```
    /// use boxfall::{key::{local_keys, LocalKeysGuard}, DispatchKey};
    /// let _ex = LocalKeysGuard::exclude(DispatchKey::NATIVE.set());
    /// {
    ///     let _inc = LocalKeysGuard::include(DispatchKey::NATIVE.set());
    ///     assert!(local_keys().0.contains(DispatchKey::NATIVE) && !local_keys().1.contains(DispatchKey::NATIVE));
    /// }
    /// assert!(local_keys().1.contains(DispatchKey::NATIVE)); // excluded again
    /// ```
    pub fn include(keys: DispatchKeySet) -> LocalKeysGuard {
        Self::change(|(i, e)| (i | keys.0, e & !keys.0))
    }

    /// Excludes `keys` (and takes them out of the included set).
    ///
    /// ```
    /// use boxfall::{key::{local_keys, LocalKeysGuard}, DispatchKey};
    /// let _g = LocalKeysGuard::exclude(DispatchKey::NATIVE.set());
    /// assert!(local_keys().1.contains(DispatchKey::NATIVE));
    /// ```
    pub fn exclude(keys: DispatchKeySet) -> LocalKeysGuard {
        Self::change(|(i, e)| (i & !keys.0, e | keys.0))
    }

    fn change(f: impl FnOnce((u64, u64)) -> (u64, u64)) -> LocalKeysGuard {
        let previous = LOCAL_KEYS.with(|c| {
            let p = c.get();
            c.set(f(p));
            p
        });
        LocalKeysGuard { previous }
    }
}

impl Drop for LocalKeysGuard {
    fn drop(&mut self) {
        LOCAL_KEYS.with(|c| c.set(self.previous));
    }
}

/// Sets this thread's included/excluded sets directly and returns the previous ones (for
/// bindings whose scopes are not Rust scopes, such as Python context managers).
///
/// ```
/// use boxfall::{key::{local_keys, set_local_keys}, DispatchKeySet};
/// let prev = set_local_keys(DispatchKeySet(0), DispatchKeySet(0));
/// set_local_keys(prev.0, prev.1);
/// ```
pub fn set_local_keys(
    include: DispatchKeySet,
    exclude: DispatchKeySet,
) -> (DispatchKeySet, DispatchKeySet) {
    let (i, e) = LOCAL_KEYS.with(|c| c.replace((include.0, exclude.0)));
    (DispatchKeySet(i), DispatchKeySet(e))
}
