//! Key files: generating secret keys, reading and writing them and keyrings.
//!
//! Formats (text, UTF-8):
//! * a **secret key file** holds the key as 64 hexadecimal digits on one line; lines
//!   starting with `#` are comments. Written with mode 0600 on Unix.
//! * a **keyring file** holds one `<node id> <public key as 64 hex digits>` per line, with
//!   `#` comments (see [`Keyring::parse`]).

use std::io;
use std::path::Path;

use ring::rand::{SecureRandom, SystemRandom};

use crate::proto::crypto::{Identity, KeyError, Keyring, KeyringError, SecretKey, KEY_LEN};
use crate::NodeId;

/// A key file that could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// The secret key is malformed.
    #[error("{path}: {source}")]
    Key {
        /// The file.
        path: String,
        /// Why.
        source: KeyError,
    },
    /// The keyring is malformed.
    #[error("{path}: {source}")]
    Keyring {
        /// The file.
        path: String,
        /// Why.
        source: KeyringError,
    },
}

/// A new secret key from the operating system's random source.
pub fn generate_secret() -> SecretKey {
    let mut b = [0u8; KEY_LEN];
    SystemRandom::new()
        .fill(&mut b)
        .expect("the operating system's random source failed");
    SecretKey::from_bytes(b)
}

/// A closed group in one call: a fresh secret key for each of `ids`, and for each an
/// [`Identity`] whose keyring holds every member's public key. For examples, tests and
/// single-process deployments; across processes, distribute keyring files instead.
pub fn generate_group(ids: &[NodeId]) -> Vec<Identity> {
    let keys: Vec<SecretKey> = ids.iter().map(|_| generate_secret()).collect();
    let mut ring = Keyring::new();
    for (id, k) in ids.iter().zip(&keys) {
        ring.insert(*id, k.public_key());
    }
    keys.into_iter()
        .map(|k| Identity::new(k).with_keyring(ring.clone()))
        .collect()
}

fn read(path: &Path) -> Result<String, KeyFileError> {
    std::fs::read_to_string(path).map_err(|source| KeyFileError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Reads a secret key file.
pub fn read_secret(path: impl AsRef<Path>) -> Result<SecretKey, KeyFileError> {
    let path = path.as_ref();
    let text = read(path)?;
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap_or("");
    SecretKey::from_hex(line).map_err(|source| KeyFileError::Key {
        path: path.display().to_string(),
        source,
    })
}

/// Writes `key` to a new secret key file (mode 0600 on Unix); fails if the file exists.
pub fn write_secret(path: impl AsRef<Path>, key: &SecretKey) -> io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    writeln!(
        f,
        "# exon secret key (public key {})",
        key.public_key().to_hex()
    )?;
    writeln!(f, "{}", key.to_hex())?;
    f.sync_all()
}

/// Reads a keyring file.
pub fn read_keyring(path: impl AsRef<Path>) -> Result<Keyring, KeyFileError> {
    let path = path.as_ref();
    Keyring::parse(&read(path)?).map_err(|source| KeyFileError::Keyring {
        path: path.display().to_string(),
        source,
    })
}

/// Writes `keyring` to a keyring file (replacing it).
pub fn write_keyring(path: impl AsRef<Path>, keyring: &Keyring) -> io::Result<()> {
    std::fs::write(path, keyring.to_text())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_differ_and_files_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (generate_secret(), generate_secret());
        assert_ne!(a.public_key(), b.public_key());
        let p = dir.path().join("a.key");
        write_secret(&p, &a).unwrap();
        assert_eq!(read_secret(&p).unwrap().public_key(), a.public_key());
        assert!(
            write_secret(&p, &b).is_err(),
            "never overwrites a secret key"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "readable by others: {mode:o}");
        }
        let mut ring = Keyring::new();
        ring.insert(NodeId::from_const(1), a.public_key());
        let r = dir.path().join("ring");
        write_keyring(&r, &ring).unwrap();
        assert_eq!(read_keyring(&r).unwrap(), ring);
        std::fs::write(&r, "1 nothex\n").unwrap();
        assert!(matches!(
            read_keyring(&r),
            Err(KeyFileError::Keyring { .. })
        ));
        std::fs::write(&p, "short\n").ok();
        assert!(read_secret(dir.path().join("missing")).is_err());
    }
}
