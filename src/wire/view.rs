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

pub(crate) use fixed_view;
