//! The accessor kinds of CM fields and the macro that turns a message's field list into
//! its view accessors and its `Repr`.
//!
//! Kinds, each at a byte offset `o` from the start of the CM message (MAD byte 24 + `o`):
//! `u8(o)`, `u16(o)`, `u24(o)`, `u32(o)`, `u64(o)`, big-endian; `bits(o, shift, width)`,
//! a bit field of byte `o` (bit 0 is the least significant: the IBA's MSB-first
//! "[7:3]" is `bits(o, 3, 5)`); `flag(o, bit)`; `bytes(o, n)`, raw bytes (GIDs, private
//! data); `reason(o)`, a REJ reason; `path(o)`, a REQ's 44-byte path; `u32bits(o, shift,
//! width)`, a bit field of the big-endian 32-bit word at `o` (a flow label's 20 bits, or
//! ClassPortInfo's CapabilityMask2), bit 0 again the least significant.

/// Reads bits `shift..shift + width` of `b`.
#[inline]
pub(crate) const fn get_bits(b: u8, shift: u32, width: u32) -> u8 {
    (b >> shift) & ((1u16 << width) - 1) as u8
}

/// Replaces bits `shift..shift + width` of `*b` with the low bits of `v`.
#[inline]
pub(crate) fn set_bits(b: &mut u8, shift: u32, width: u32, v: u8) {
    let m = ((1u16 << width) - 1) as u8;
    *b = (*b & !(m << shift)) | ((v & m) << shift);
}

macro_rules! cm_get {
    ($b:expr, u8($o:expr)) => {
        $b[$o]
    };
    ($b:expr, u16($o:expr)) => {
        $crate::wire::field::u16_at($b, $o..$o + 2)
    };
    ($b:expr, u24($o:expr)) => {
        $crate::wire::field::u24_at($b, $o..$o + 3)
    };
    ($b:expr, u32($o:expr)) => {
        $crate::wire::field::u32_at($b, $o..$o + 4)
    };
    ($b:expr, u64($o:expr)) => {
        $crate::wire::field::u64_at($b, $o..$o + 8)
    };
    ($b:expr, bits($o:expr, $s:expr, $w:expr)) => {
        $crate::wire::cm::fields::get_bits($b[$o], $s, $w)
    };
    ($b:expr, flag($o:expr, $bit:expr)) => {
        $b[$o] & (1u8 << $bit) != 0
    };
    ($b:expr, u32bits($o:expr, $s:expr, $w:expr)) => {
        ($crate::wire::field::u32_at($b, $o..$o + 4) >> $s) & ((1u64 << $w) - 1) as u32
    };
    ($b:expr, bytes($o:expr, $n:expr)) => {{
        let mut a = [0u8; $n];
        a.copy_from_slice(&$b[$o..$o + $n]);
        a
    }};
    ($b:expr, reason($o:expr)) => {
        $crate::wire::cm::RejReason::from_code($crate::wire::field::u16_at($b, $o..$o + 2))
    };
    ($b:expr, path($o:expr)) => {
        $crate::wire::cm::path::Path::read(&$b[$o..$o + $crate::wire::cm::path::PATH_LEN])
    };
}

macro_rules! cm_set {
    ($b:expr, $v:expr, u8($o:expr)) => {
        $b[$o] = $v
    };
    ($b:expr, $v:expr, u16($o:expr)) => {
        $crate::wire::field::set_u16($b, $o..$o + 2, $v)
    };
    ($b:expr, $v:expr, u24($o:expr)) => {
        $crate::wire::field::set_u24($b, $o..$o + 3, $v)
    };
    ($b:expr, $v:expr, u32($o:expr)) => {
        $crate::wire::field::set_u32($b, $o..$o + 4, $v)
    };
    ($b:expr, $v:expr, u64($o:expr)) => {
        $crate::wire::field::set_u64($b, $o..$o + 8, $v)
    };
    ($b:expr, $v:expr, bits($o:expr, $s:expr, $w:expr)) => {
        $crate::wire::cm::fields::set_bits(&mut $b[$o], $s, $w, $v)
    };
    ($b:expr, $v:expr, flag($o:expr, $bit:expr)) => {
        if $v {
            $b[$o] |= 1u8 << $bit
        } else {
            $b[$o] &= !(1u8 << $bit)
        }
    };
    ($b:expr, $v:expr, bytes($o:expr, $n:expr)) => {
        $b[$o..$o + $n].copy_from_slice(&$v)
    };
    ($b:expr, $v:expr, u32bits($o:expr, $s:expr, $w:expr)) => {{
        let m = ((1u64 << $w) - 1) as u32;
        let old = $crate::wire::field::u32_at($b, $o..$o + 4);
        $crate::wire::field::set_u32($b, $o..$o + 4, (old & !(m << $s)) | (($v & m) << $s))
    }};
    ($b:expr, $v:expr, reason($o:expr)) => {
        $crate::wire::field::set_u16($b, $o..$o + 2, $v.code())
    };
    ($b:expr, $v:expr, path($o:expr)) => {
        $v.write(&mut $b[$o..$o + $crate::wire::cm::path::PATH_LEN])
    };
}

/// Defines `Packet` (a view of the 232-byte CM message), one getter and setter per field,
/// and `Repr` with `parse`, `buffer_len` and `emit`. Emit zeroes the message first, so
/// reserved bits and bytes are written as zero; a setter changes only its own bits.
macro_rules! cm_message {
    (
        $(#[$rdoc:meta])*
        fields:
        $($(#[$doc:meta])* $name:ident / $set:ident: $ty:ty = $kind:ident($($arg:expr),*)),+ $(,)?
    ) => {
        $crate::wire::view::fixed_view!($crate::wire::Header::Cm, $crate::wire::cm::MSG_LEN);

        impl<T: AsRef<[u8]>> Packet<T> {
            $(
                $(#[$doc])*
                #[inline]
                pub fn $name(&self) -> $ty {
                    let b = self.buffer.as_ref();
                    $crate::wire::cm::fields::cm_get!(b, $kind($($arg),*))
                }
            )+
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            $(
                #[inline]
                pub fn $set(&mut self, v: $ty) {
                    let b = self.buffer.as_mut();
                    $crate::wire::cm::fields::cm_set!(b, v, $kind($($arg),*));
                }
            )+

            /// Zeroes the whole message (reserved fields included).
            #[inline]
            pub fn clear(&mut self) {
                self.buffer.as_mut()[..$crate::wire::cm::MSG_LEN].fill(0);
            }
        }

        $(#[$rdoc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct Repr {
            $($(#[$doc])* pub $name: $ty,)+
        }

        impl Repr {
            /// Reads every field; fails only on a buffer shorter than the message.
            pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> $crate::wire::Result<Repr> {
                p.check_len()?;
                Ok(Repr {
                    $($name: p.$name(),)+
                })
            }
            pub const fn buffer_len(&self) -> usize {
                $crate::wire::cm::MSG_LEN
            }
            /// Writes all 232 bytes; reserved bits become zero, and values wider than
            /// their field are cut to it.
            pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
                p.clear();
                $(p.$set(self.$name);)+
            }
        }
    };
}

pub(crate) use cm_get;
pub(crate) use cm_message;
pub(crate) use cm_set;
