//! The `counters!` macro: a struct of counters whose `merge`, sum and visit are generated.

/// Defines a struct of counters (with its attributes and documentation) and generates its
/// `merge` (each counter summed, `[max]` ones kept at the larger value, `[nested]` ones
/// merged in turn, `[size]` ones summed) and `sum_of_counters` (the sum of its `[sum]`
/// counters; sizes such as entries held are left out) and `visit` (each field that is not a
/// nested group, by name, with its value and whether it only grows), so that no counter can
/// be left out of any of them.
macro_rules! counters {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident: $ty:ty [$how:ident], )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $name {
            /// Adds `other`'s counts to these (counters of several nodes, such as the shards
            /// of one endpoint, summed; largest values kept).
            pub fn merge(&mut self, other: &$name) {
                $( $crate::counters::counters!(@merge $how, self.$field, other.$field); )*
            }

            /// Sum of the plain counters (nested groups, sizes and largest values left out).
            #[allow(dead_code)]
            pub(crate) fn sum_of_counters(&self) -> u64 {
                0 $( + $crate::counters::counters!(@total $how, self.$field) )*
            }

            /// Calls `f` with the name, the value and the [`Kind`](crate::counters::Kind) of
            /// each field that is not a nested group (those have their own `visit`).
            #[allow(dead_code)]
            pub(crate) fn visit(&self, f: &mut dyn FnMut(&'static str, u64, $crate::counters::Kind)) {
                $( $crate::counters::counters!(@visit $how, f, stringify!($field), self.$field); )*
            }
        }
    };
    (@visit sum, $f:ident, $n:expr, $a:expr) => { $f($n, $a as u64, $crate::counters::Kind::Counter) };
    (@visit size, $f:ident, $n:expr, $a:expr) => { $f($n, $a as u64, $crate::counters::Kind::Gauge) };
    (@visit max, $f:ident, $n:expr, $a:expr) => { $f($n, $a as u64, $crate::counters::Kind::Gauge) };
    (@visit nested, $f:ident, $n:expr, $a:expr) => { () };
    (@merge sum, $a:expr, $b:expr) => { $a += $b };
    (@merge size, $a:expr, $b:expr) => { $a += $b };
    (@merge max, $a:expr, $b:expr) => { $a = $a.max($b) };
    (@merge nested, $a:expr, $b:expr) => { $a.merge(&$b) };
    (@total sum, $a:expr) => { $a };
    (@total size, $a:expr) => { 0 };
    (@total max, $a:expr) => { 0 };
    (@total nested, $a:expr) => { 0 };
}

pub(crate) use counters;

/// What a field of a `counters!` struct is, for exporters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)]
pub(crate) enum Kind {
    /// It only grows (a `[sum]` field).
    Counter,
    /// It goes up and down, or is a largest value (`[size]` and `[max]` fields).
    Gauge,
}
