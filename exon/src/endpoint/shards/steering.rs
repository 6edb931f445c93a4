//! Which shard owns a peer, and the kernel program that hands each datagram to that shard's
//! socket (a classic BPF program on the `SO_REUSEPORT` group), so that no datagram takes a
//! hop between shards.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use crate::NodeId;

/// The owner hash: the 32-bit finaliser of MurmurHash3 over the node id's two 32-bit
/// halves folded together, so that ids differing in any bit (sequential, strided, or only
/// in their high half) spread over the shards.
fn mix(id: u64) -> u32 {
    let mut h = (id as u32) ^ ((id >> 32) as u32);
    h ^= h >> 16;
    h = h.wrapping_mul(M1);
    h ^= h >> 13;
    h = h.wrapping_mul(M2);
    h ^ (h >> 16)
}

const M1: u32 = 0x85eb_ca6b;
const M2: u32 = 0xc2b2_ae35;

/// The shard that owns `peer` in an endpoint of `n` shards
/// ([`EndpointConfig::shards`](crate::endpoint::EndpointConfig::shards)): a fixed hash of the node
/// id, so that every datagram from and every message to a peer goes through the same shard.
/// The kernel program that steers datagrams computes the same function from a datagram's
/// header; it does not change between versions of this crate that share the wire format.
pub fn shard_of(peer: NodeId, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    (mix(peer.get()) % n.min(u32::MAX as usize) as u32) as usize
}

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insn {
    pub(crate) code: u16,
    pub(crate) jt: u8,
    pub(crate) jf: u8,
    pub(crate) k: u32,
}

// Classic BPF opcodes (linux/filter.h).
const LD_B_ABS: u16 = 0x30;
const LD_H_ABS: u16 = 0x28;
const LD_W_ABS: u16 = 0x20;
const ALU_AND_K: u16 = 0x54;
const ALU_RSH_K: u16 = 0x74;
const ALU_MUL_K: u16 = 0x24;
const ALU_MOD_K: u16 = 0x94;
const ALU_XOR_X: u16 = 0xac;
const MISC_TAX: u16 = 0x07;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const RET_A: u16 = 0x16;

/// Where the source node id (a varint, `docs/wire.md`) starts in every datagram: after the
/// byte that holds the version and the flags.
const SRC_AT: u32 = 1;

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

/// The program for a group of `n` sockets (`n` ≥ 1): it reads the source node id from the
/// clear header of the datagram (the UDP payload) and returns [`shard_of`] of it, the index
/// of the owner's socket in the group. The kernel runs it on every datagram that arrives at
/// the group's address. On a datagram too short to hold the id the program stops and the
/// kernel picks socket 0 (whose node rejects the datagram, as any shard's would); on one
/// whose bytes are not an exon header it picks some socket, and the forwarding in the
/// driver corrects any choice the program gets wrong.
pub(crate) fn program(n: usize) -> Vec<Insn> {
    let n = n.clamp(1, u32::MAX as usize) as u32;
    vec![
        // 0: the varint's length code: the top two bits of its first byte.
        insn(LD_B_ABS, 0, 0, SRC_AT),
        insn(ALU_RSH_K, 0, 0, 6),
        insn(JMP_JEQ_K, 2, 0, 0), // 2: one byte  -> 5
        insn(JMP_JEQ_K, 4, 0, 1), // 3: two bytes -> 8
        insn(JMP_JEQ_K, 6, 9, 2), // 4: four bytes -> 11, else eight -> 14
        // 5: one byte.
        insn(LD_B_ABS, 0, 0, SRC_AT),
        insn(ALU_AND_K, 0, 0, 0x3f),
        insn(JMP_JA, 0, 0, 11), // -> 19
        // 8: two bytes, big-endian.
        insn(LD_H_ABS, 0, 0, SRC_AT),
        insn(ALU_AND_K, 0, 0, 0x3fff),
        insn(JMP_JA, 0, 0, 8), // -> 19
        // 11: four bytes.
        insn(LD_W_ABS, 0, 0, SRC_AT),
        insn(ALU_AND_K, 0, 0, 0x3fff_ffff),
        insn(JMP_JA, 0, 0, 5), // -> 19
        // 14: eight bytes: the high half (less the length code) xor the low half.
        insn(LD_W_ABS, 0, 0, SRC_AT),
        insn(ALU_AND_K, 0, 0, 0x3fff_ffff),
        insn(MISC_TAX, 0, 0, 0),
        insn(LD_W_ABS, 0, 0, SRC_AT + 4),
        insn(ALU_XOR_X, 0, 0, 0),
        // 19: `mix`, then the shard.
        insn(MISC_TAX, 0, 0, 0),
        insn(ALU_RSH_K, 0, 0, 16),
        insn(ALU_XOR_X, 0, 0, 0),
        insn(ALU_MUL_K, 0, 0, M1),
        insn(MISC_TAX, 0, 0, 0),
        insn(ALU_RSH_K, 0, 0, 13),
        insn(ALU_XOR_X, 0, 0, 0),
        insn(ALU_MUL_K, 0, 0, M2),
        insn(MISC_TAX, 0, 0, 0),
        insn(ALU_RSH_K, 0, 0, 16),
        insn(ALU_XOR_X, 0, 0, 0),
        insn(ALU_MOD_K, 0, 0, n),
        insn(RET_A, 0, 0, 0),
    ]
}

/// Attaches [`program`] for `n` sockets to the `SO_REUSEPORT` group of `socket` (any member;
/// the group's sockets are indexed in the order they were bound).
#[cfg(target_os = "linux")]
pub(crate) fn attach(socket: &impl std::os::fd::AsRawFd, n: usize) -> std::io::Result<()> {
    let mut filter: Vec<libc::sock_filter> = program(n)
        .into_iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let prog = libc::sock_fprog {
        len: filter.len() as libc::c_ushort,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: `prog` points to `filter`, which outlives the call; the kernel copies the
    // program and checks it before attaching it; the length passed is `prog`'s size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&prog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Header;

    /// Runs a classic BPF program (only the instructions [`program`] uses) on `packet` as
    /// the kernel does: `None` where a load falls outside the packet (the kernel then
    /// stops the program with 0).
    fn run(prog: &[Insn], packet: &[u8]) -> Option<u32> {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        loop {
            let i = prog[pc];
            pc += 1;
            let at = i.k as usize;
            match i.code {
                LD_B_ABS => a = *packet.get(at)? as u32,
                LD_H_ABS => a = u16::from_be_bytes(packet.get(at..at + 2)?.try_into().ok()?) as u32,
                LD_W_ABS => a = u32::from_be_bytes(packet.get(at..at + 4)?.try_into().ok()?),
                ALU_AND_K => a &= i.k,
                ALU_RSH_K => a >>= i.k,
                ALU_MUL_K => a = a.wrapping_mul(i.k),
                ALU_MOD_K => a %= i.k,
                ALU_XOR_X => a ^= x,
                MISC_TAX => x = a,
                JMP_JA => pc += i.k as usize,
                JMP_JEQ_K => pc += if a == i.k { i.jt } else { i.jf } as usize,
                RET_A => return Some(a),
                c => panic!("opcode {c:#x} not in the program"),
            }
        }
    }

    fn datagram(src: u64) -> Vec<u8> {
        let mut out = Vec::new();
        Header::new(NodeId::new(src).unwrap(), NodeId::from_const(1)).encode(&mut out);
        out.extend_from_slice(&[0; 8]);
        out
    }

    #[test]
    fn the_program_computes_the_owner_for_ids_of_every_length() {
        let ids = [0u64, 1, 2, 63, 64, 16_383, 16_384, (1 << 30) - 1, 1 << 30]
            .into_iter()
            .chain([
                0xdead_beef_u64,
                (1 << 62) - 1,
                0x1234_5678_9abc_def0 & ((1 << 62) - 1),
            ])
            .chain((0..2000).map(|i| i * 7919 + 5));
        for n in [1, 2, 3, 4, 8, 16, 256] {
            let prog = program(n);
            for id in ids.clone() {
                let got = run(&prog, &datagram(id));
                assert_eq!(
                    got,
                    Some(shard_of(NodeId::new(id).unwrap(), n) as u32),
                    "id {id} n {n}"
                );
            }
        }
    }

    #[test]
    fn sequential_and_strided_ids_spread_over_the_shards() {
        for stride in [1u64, 2, 8, 64, 1 << 20, 1 << 32, 1 << 40] {
            let mut count = [0usize; 8];
            for i in 0..800 {
                count[shard_of(NodeId::new(1 + i * stride).unwrap(), 8)] += 1;
            }
            assert!(
                count.iter().all(|&c| (50..=150).contains(&c)),
                "stride {stride}: {count:?}"
            );
        }
    }

    #[test]
    fn a_short_datagram_stops_the_program() {
        let prog = program(4);
        assert_eq!(run(&prog, &[0x52]), None);
        // An eight-byte id cut short.
        assert_eq!(run(&prog, &[0x52, 0xc0, 1, 2, 3, 4]), None);
    }
}
