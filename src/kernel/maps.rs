//! The tensor maps a wrapping kernel puts around a wrapped kernel's typed function, and the
//! steps of a typed call with its tensors mapped.

use crate::error::{Error, Result};
use crate::ivalue::{CallArgs, CallReturns, TensorMap};
use crate::key::DispatchKeySet;
use crate::tensor::Tensor;

use super::unboxed::UnboxedFn;

/// The tensor maps a wrapping kernel puts around a wrapped kernel's typed function
/// ([`TypedCall::run`](crate::kernel::TypedCall::run),
/// [`KernelFunction::call_mapped`](crate::KernelFunction::call_mapped)): the argument tensors go
/// through `args` before the function runs, each returned tensor through `ret` after. The CPU
/// fallback's move tensors to the CPU and back; a logging key's may only look.
///
/// ```
/// use boxfall::kernel::{TensorBatch, TensorMaps};
/// use boxfall::Tensor;
/// struct Same;
/// impl TensorMaps for Same {
///     fn args(&mut self, _: &mut TensorBatch<'_, '_>, _last: bool) -> boxfall::Result<()> { Ok(()) }
///     fn ret(&mut self, t: Tensor) -> boxfall::Result<Tensor> { Ok(t) }
/// }
/// let e = Same.kernel_error(boxfall::Error::Fallback("no".into()));
/// assert!(e.to_string().contains("no"));
/// ```
pub trait TensorMaps {
    /// Replaces argument tensors in place: `tensors` holds the next ones, in order (a call
    /// with many comes in several batches); `last` says that none follow, so the function runs
    /// next (an error then stops the call before it runs).
    fn args(&mut self, tensors: &mut TensorBatch<'_, '_>, last: bool) -> Result<()>;
    /// The error the caller sees for an error of the function (or of unboxing its arguments).
    fn kernel_error(&mut self, e: Error) -> Error {
        e
    }
    /// The tensor that takes a returned tensor's place.
    fn ret(&mut self, t: Tensor) -> Result<Tensor>;
}

/// Argument tensors of a typed call, a batch at a time, as [`TensorMaps::args`] gets them: in
/// one call rather than one call a tensor, so that a wrapper's per-tensor work is its own
/// loop, not a virtual call each.
///
/// ```
/// use boxfall::kernel::TensorBatch;
/// use boxfall::Tensor;
/// let mut t = Tensor::from_array(ndarray::arr1(&[1.0]).into_dyn());
/// let mut slots = [Some(&mut t), None];
/// let mut batch = TensorBatch::new(&mut slots);
/// assert_eq!(batch.iter_mut().count(), 1);
/// ```
pub struct TensorBatch<'s, 'a>(pub(crate) &'s mut [Option<&'a mut Tensor>]);

impl<'s, 'a> TensorBatch<'s, 'a> {
    /// A batch of the tensors in `slots` (empty slots are skipped).
    #[inline(always)]
    pub fn new(slots: &'s mut [Option<&'a mut Tensor>]) -> TensorBatch<'s, 'a> {
        TensorBatch(slots)
    }

    /// The batch's tensors, in order.
    #[inline(always)]
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Tensor> + use<'_, 's, 'a> {
        self.0.iter_mut().flatten().map(|t| &mut **t)
    }
}

/// How many argument tensors a batch holds.
const BATCH: usize = 8;

/// `f` on `args` with the tensors mapped: the steps every mapped typed call takes.
#[inline(always)]
pub(crate) fn run_mapped<A: CallArgs, R: CallReturns>(
    f: UnboxedFn<A, R>,
    keys: DispatchKeySet,
    mut args: A,
    maps: &mut dyn TensorMaps,
) -> Result<R> {
    map_args(&mut args, maps)?;
    let returns = match f(keys, args) {
        Ok(r) => r,
        Err(e) => return Err(maps.kernel_error(e)),
    };
    returns.map_tensors(&mut Returns(maps))
}

/// The argument tensors through `maps.args`, in batches.
#[inline(always)]
fn map_args<A: CallArgs>(args: &mut A, maps: &mut dyn TensorMaps) -> Result<()> {
    let mut batch: [Option<&mut Tensor>; BATCH] = Default::default();
    let mut n = 0;
    args.for_each_tensor_mut(&mut |t| {
        if n == BATCH {
            maps.args(&mut TensorBatch(&mut batch), false)?;
            n = 0;
        }
        batch[n] = Some(t);
        n += 1;
        Ok(())
    })?;
    maps.args(&mut TensorBatch(&mut batch[..n]), true)
}

struct Returns<'m>(&'m mut dyn TensorMaps);

impl TensorMap for Returns<'_> {
    #[inline(always)]
    fn map(&mut self, t: Tensor) -> Result<Tensor> {
        self.0.ret(t)
    }
}
