//! The `counters!` macro: a struct of counters whose `merge` and sum are generated.

/// Defines a struct of counters (with its attributes and documentation) and generates its
/// `merge` (each counter summed, `[max]` ones kept at the larger value, `[nested]` ones
/// merged in turn, `[size]` ones summed) and `sum_of_counters` (the sum of its `[sum]`
/// counters; sizes such as entries held are left out), so that no counter can be left out
/// of either.
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
        }
    };
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
