//! Session ticket keys shared by all workers: made by the master from the
//! OS's random numbers before it forks (so every worker seals and opens the
//! same tickets), kept for the master's life across reloads and handed to
//! a new binary on an upgrade; or read from `ssl_session_ticket_key` files
//! (the first file's key seals, all of them open).
//!
//! A ticket is `name (16) | nonce (12) | AES-256-GCM(state) with the name
//! as associated data`; the AEAD key is HKDF-SHA256 of the key's secret
//! bytes (aws-lc-rs does both). No I/O.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};

const NAME: usize = 16;

struct Key {
    name: [u8; NAME],
    aead: LessSafeKey,
}

/// A list of ticket keys: the first seals, all open.
pub struct TicketKeys {
    keys: Vec<Key>,
    /// The material they were made from (what a new binary is given).
    material: Vec<Vec<u8>>,
    rng: SystemRandom,
}

impl std::fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TicketKeys({})", self.keys.len())
    }
}

fn key(material: &[u8]) -> Option<Key> {
    if material.len() != 80 && material.len() != 48 {
        return None;
    }
    let mut name = [0u8; NAME];
    name.copy_from_slice(&material[..NAME]);
    let prk =
        aws_lc_rs::hkdf::Salt::new(aws_lc_rs::hkdf::HKDF_SHA256, &[]).extract(&material[NAME..]);
    let okm = prk
        .expand(&[b"sluice session ticket key"], &AES_256_GCM)
        .ok()?;
    Some(Key {
        name,
        aead: LessSafeKey::new(UnboundKey::from(okm)),
    })
}

impl TicketKeys {
    /// The size of the master's own key material, as a long nginx key file.
    pub const MATERIAL: usize = 80;

    /// Keys from key files' contents (48 or 80 bytes each, nginx's sizes:
    /// a 16-byte name, then the secret). None if there is none or one has
    /// another size.
    pub fn from_material(list: &[Vec<u8>]) -> Option<TicketKeys> {
        let keys = list.iter().map(|m| key(m)).collect::<Option<Vec<_>>>()?;
        if keys.is_empty() {
            return None;
        }
        Some(TicketKeys {
            keys,
            material: list.to_vec(),
            rng: SystemRandom::new(),
        })
    }

    /// One new key from the OS's random numbers.
    pub fn generate() -> Option<TicketKeys> {
        let mut m = vec![0u8; TicketKeys::MATERIAL];
        SystemRandom::new().fill(&mut m).ok()?;
        TicketKeys::from_material(&[m])
    }

    /// The first key's material (the master's own key, for a new binary).
    pub fn material(&self) -> &[u8] {
        self.material.first().map_or(&[], |m| m.as_slice())
    }

    pub fn seal(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let k = self.keys.first()?;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(NAME + NONCE_LEN + plain.len() + 16);
        out.extend_from_slice(&k.name);
        out.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        k.aead
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&k.name),
                &mut body,
            )
            .ok()?;
        out.extend_from_slice(&body);
        Some(out)
    }

    /// Whether `ticket` names the key that seals now (what it holds is not
    /// checked): such a ticket needs no renewing, as OpenSSL's servers
    /// renew only tickets an older key sealed.
    pub fn sealed_by_current(&self, ticket: &[u8]) -> bool {
        self.keys
            .first()
            .is_some_and(|k| ticket.get(..NAME) == Some(&k.name[..]))
    }

    /// The state in a ticket one of the keys sealed; None for anything else.
    pub fn open(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < NAME + NONCE_LEN + AES_256_GCM.tag_len() {
            return None;
        }
        let (name, rest) = ticket.split_at(NAME);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let k = self.keys.iter().find(|k| k.name == name)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = sealed.to_vec();
        let n = k
            .aead
            .open_in_place(nonce, Aad::from(&k.name), &mut body)
            .ok()?
            .len();
        body.truncate(n);
        Some(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seals_and_opens() {
        let k = TicketKeys::generate().expect("keys");
        let t = k.seal(b"state").expect("sealed");
        assert_eq!(t.len(), 16 + 12 + 5 + 16);
        assert_eq!(k.open(&t).as_deref(), Some(&b"state"[..]));
        let mut bad = t.clone();
        bad[30] ^= 1;
        assert_eq!(k.open(&bad), None, "tampered");
        assert_eq!(k.open(&t[..20]), None, "short");
        let other = TicketKeys::generate().expect("keys");
        assert_eq!(other.open(&t), None, "another key");
        let same = TicketKeys::from_material(&[k.material().to_vec()]).expect("keys");
        assert_eq!(
            same.open(&t).as_deref(),
            Some(&b"state"[..]),
            "same material"
        );
    }

    #[test]
    fn files_first_seals_all_open() {
        let a = vec![1u8; 80];
        let b = vec![2u8; 48];
        let ab = TicketKeys::from_material(&[a.clone(), b.clone()]).expect("keys");
        let ba = TicketKeys::from_material(&[b, a.clone()]).expect("keys");
        let t = ba.seal(b"x").expect("sealed");
        assert_eq!(ab.open(&t).as_deref(), Some(&b"x"[..]));
        let only_a = TicketKeys::from_material(&[a]).expect("keys");
        assert_eq!(only_a.open(&t), None);
        assert!(ba.sealed_by_current(&t), "the first key sealed it");
        assert!(!ab.sealed_by_current(&t), "an older key sealed it");
        assert!(!ba.sealed_by_current(&t[..15]), "too short to name a key");
        assert!(TicketKeys::from_material(&[vec![0; 47]]).is_none());
        assert!(TicketKeys::from_material(&[]).is_none());
    }

    proptest! {
        #[test]
        fn garbage_tickets_never_open(t in proptest::collection::vec(any::<u8>(), 0..300)) {
            let k = TicketKeys::from_material(&[vec![3u8; 80]]).expect("keys");
            prop_assert_eq!(k.open(&t), None);
        }
    }
}
