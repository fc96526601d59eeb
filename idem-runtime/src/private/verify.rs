//! `verify = path` (S19, C10): how the expansion calls a tool's verify function, or reports
//! one that does not fit.

use std::marker::PhantomData;

use crate::Verified;

// `verify = path` (S19, C10). The expansion looks at the function through a `VerifyProbe` of the
// tool's parameter types, `T` and `E`, by autoref specialization: a `Verifier` (which calls it)
// when it is an `async fn` of those parameters answering `Result<Verified<T>, E>`, else a
// `Misfit`, never run, which the expansion's own assertion reports at the path with the
// signature to write. So a misfit is one error, not a cascade from the call.

/// The types a `verify` function's fit is judged by, without owning any (so `Send`, `Sync`).
type Signature<A, T, E> = PhantomData<fn() -> (A, T, E)>;

/// Selects how the `verify` function `F` is called with the arguments `A` (a tuple).
pub struct VerifyProbe<F, A, T, E>(F, Signature<A, T, E>);

impl<F, A, T, E> VerifyProbe<F, A, T, E> {
    /// The probe of `verify`.
    pub fn new(verify: F) -> Self {
        VerifyProbe(verify, PhantomData)
    }
}

/// Calls a `verify` function that fits its tool.
pub struct Verifier<F, A, T, E>(F, Signature<A, T, E>);

/// A `verify` function that does not fit its tool: never called, the build has failed.
pub struct Misfit<A, T, E>(Signature<A, T, E>);

impl<A, T, E> Misfit<A, T, E> {
    pub fn call(&self, _arguments: A) -> core::future::Pending<Result<Verified<T>, E>> {
        unreachable!("idemkit: a tool whose `verify` function does not fit it does not compile")
    }
}

/// Picked when `verify` fits.
pub trait VerifyFits<F, A, T, E> {
    /// The verifier.
    fn verify_fit(&self) -> Verifier<F, A, T, E>;
}

/// Picked otherwise.
pub trait VerifyMisfits<A, T, E> {
    /// The misfit.
    fn verify_fit(&self) -> Misfit<A, T, E>;
}

impl<F, A, T, E> VerifyMisfits<A, T, E> for &VerifyProbe<F, A, T, E> {
    fn verify_fit(&self) -> Misfit<A, T, E> {
        Misfit(PhantomData)
    }
}

/// How a `verify` function's error reads in the record's note and the call's span when a
/// verification fails: by its `Display`, else its `Debug`, else not at all (the runtime then
/// says how it classifies). Picked by autoref specialization where the expansion names `E`:
/// `(&&&Describe::<E>::new()).describer()`.
pub struct Describe<E>(PhantomData<fn(&E)>);

impl<E> Describe<E> {
    /// The selector for `E`.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Describe(PhantomData)
    }
}

/// Picked when `E: Display`.
pub trait DescribeByDisplay<E> {
    /// `E`'s `Display`.
    fn describer(&self) -> Option<fn(&E) -> String>;
}

impl<E: core::fmt::Display> DescribeByDisplay<E> for &&Describe<E> {
    fn describer(&self) -> Option<fn(&E) -> String> {
        Some(|e| e.to_string())
    }
}

/// Picked when `E: Debug` only.
pub trait DescribeByDebug<E> {
    /// `E`'s `Debug`.
    fn describer(&self) -> Option<fn(&E) -> String>;
}

impl<E: core::fmt::Debug> DescribeByDebug<E> for &Describe<E> {
    fn describer(&self) -> Option<fn(&E) -> String> {
        Some(|e| format!("{e:?}"))
    }
}

/// Picked otherwise.
pub trait DescribeNot<E> {
    /// Nothing.
    fn describer(&self) -> Option<fn(&E) -> String>;
}

impl<E> DescribeNot<E> for Describe<E> {
    fn describer(&self) -> Option<fn(&E) -> String> {
        None
    }
}

/// One arity of `verify` functions: the tool's receiver, key and parameters count.
macro_rules! verify_arity {
    ($($a:ident),*) => {
        impl<F: Copy, $($a,)* T, E> VerifyFits<F, ($($a,)*), T, E> for VerifyProbe<F, ($($a,)*), T, E>
        where
            F: AsyncFn($($a),*) -> Result<Verified<T>, E>,
        {
            fn verify_fit(&self) -> Verifier<F, ($($a,)*), T, E> {
                Verifier(self.0, PhantomData)
            }
        }

        impl<F, $($a,)* T, E> Verifier<F, ($($a,)*), T, E>
        where
            F: AsyncFn($($a),*) -> Result<Verified<T>, E>,
        {
            /// The verification, with the attempt's arguments.
            #[allow(non_snake_case, clippy::unused_unit)]
            pub fn call(
                &self,
                ($($a,)*): ($($a,)*),
            ) -> impl core::future::Future<Output = Result<Verified<T>, E>> + '_ {
                (self.0)($($a),*)
            }
        }
    };
}

verify_arity!();
verify_arity!(A0);
verify_arity!(A0, A1);
verify_arity!(A0, A1, A2);
verify_arity!(A0, A1, A2, A3);
verify_arity!(A0, A1, A2, A3, A4);
verify_arity!(A0, A1, A2, A3, A4, A5);
verify_arity!(A0, A1, A2, A3, A4, A5, A6);
verify_arity!(A0, A1, A2, A3, A4, A5, A6, A7);
verify_arity!(A0, A1, A2, A3, A4, A5, A6, A7, A8);
verify_arity!(A0, A1, A2, A3, A4, A5, A6, A7, A8, A9);
verify_arity!(A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10);
verify_arity!(A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11);
verify_arity!(A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12);
verify_arity!(A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13);
verify_arity!(
    A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13, A14
);
verify_arity!(
    A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13, A14, A15
);
