//! The view boilerplate every fixed-length header shares.

/// Defines `pub struct Packet<T>` for a header of `$len` bytes, with the contract of
/// [`crate::wire`]: `new_unchecked`, `check_len`, `new_checked`, `into_inner`, `as_bytes`.
macro_rules! fixed_view {
    ($header:expr, $len:expr) => {
        /// A view of the header over a buffer (see [`crate::wire`] for the contract).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// Wraps a buffer without checking its length.
            #[inline]
            pub const fn new_unchecked(buffer: T) -> Packet<T> {
                Packet { buffer }
            }

            /// Wraps a buffer after proving every accessor is in bounds.
            #[inline]
            pub fn new_checked(buffer: T) -> $crate::wire::Result<Packet<T>> {
                let p = Packet::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }

            /// `Truncated` if the buffer is shorter than the header.
            #[inline]
            pub fn check_len(&self) -> $crate::wire::Result<()> {
                let have = self.buffer.as_ref().len();
                if have < $len {
                    Err($crate::wire::error::truncated($header, $len, have))
                } else {
                    Ok(())
                }
            }

            #[inline]
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The header's bytes (the buffer may be longer).
            #[inline]
            pub fn as_bytes(&self) -> &[u8] {
                &self.buffer.as_ref()[..$len]
            }
        }
    };
}

/// For a header (after [`fixed_view!`]) whose fields are all whole big-endian integers:
/// the view's getter and setter of each field, and `Repr` with one member per field,
/// `parse`, `buffer_len` and `emit`. RETH, AtomicETH, AtomicAckETH, ImmDt and IETH are
/// such headers; the ones with bit fields, reserved bytes or 24-bit values (BTH, AETH,
/// DETH) write theirs by hand.
macro_rules! plain_fields {
    (
        $(#[$rdoc:meta])*
        len: $len:expr;
        $($(#[$doc:meta])* $name:ident / $set:ident: $ty:ty = $field:expr),+ $(,)?
    ) => {
        impl<T: AsRef<[u8]>> Packet<T> {
            $(
                $(#[$doc])*
                #[inline]
                pub fn $name(&self) -> $ty {
                    <$ty as $crate::wire::field::BeInt>::get(self.buffer.as_ref(), $field)
                }
            )+
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            $(
                #[inline]
                pub fn $set(&mut self, v: $ty) {
                    <$ty as $crate::wire::field::BeInt>::set(self.buffer.as_mut(), $field, v)
                }
            )+
        }

        $(#[$rdoc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct Repr {
            $($(#[$doc])* pub $name: $ty,)+
        }

        impl Repr {
            pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> $crate::wire::Result<Repr> {
                p.check_len()?;
                Ok(Repr {
                    $($name: p.$name(),)+
                })
            }
            pub const fn buffer_len(&self) -> usize {
                $len
            }
            pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
                $(p.$set(self.$name);)+
            }
        }
    };
}

pub(crate) use fixed_view;
pub(crate) use plain_fields;
