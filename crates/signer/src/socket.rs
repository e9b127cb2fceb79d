//! The plugin's Unix socket: created with mode 0600 before anyone can connect, replacing a stale
//! socket file, refusing a path another process serves.
//!
//! Anyone who can connect to the socket can have tokens signed, so it is made in a private
//! directory (mode 0700) beside the path, given mode 0600 there, and only then renamed onto the
//! path: no process connects to it while it has the mode the umask gave it. The rename also
//! replaces a stale socket file in one step.

use crate::SignerError;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::net::{UnixListener, UnixStream};

/// The mode of the socket: its owner only (kube-apiserver runs as the plugin's user, or as root).
pub(crate) const MODE: u32 = 0o600;

/// The socket a plugin created: its path, and which file it is, so that the plugin removes its
/// own socket only.
#[derive(Debug)]
pub(crate) struct Bound {
    path: PathBuf,
    /// The socket file's device and inode.
    file: (u64, u64),
}

impl Bound {
    /// The socket's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the socket file, when the path still names this plugin's socket.
    pub(crate) fn remove(self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| (meta.dev(), meta.ino()) == self.file);
        if ours {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::warn!(socket = %self.path.display(), error = %e, "cannot remove the socket");
            }
        }
    }
}

/// Creates the socket at `path` and listens on it.
pub(crate) async fn bind(path: &Path) -> Result<(UnixListener, Bound), SignerError> {
    let failed = |reason: String| SignerError::Socket {
        path: path.to_owned(),
        reason,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(SignerError::NotASocket {
                path: path.to_owned(),
            })
        }
        Ok(_) => match UnixStream::connect(path).await {
            Ok(_) => {
                return Err(SignerError::AlreadyServed {
                    path: path.to_owned(),
                })
            }
            // No process behind it: a plugin that did not exit cleanly. Replaced below.
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                tracing::info!(socket = %path.display(), "replacing a stale socket file");
            }
            Err(e) => {
                return Err(failed(format!(
                    "cannot tell whether a process serves it: {e}"
                )))
            }
        },
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(failed(e.to_string())),
    }
    let name = path
        .file_name()
        .ok_or_else(|| failed("the path names no file".to_owned()))?;
    let parent = path.parent().unwrap_or(Path::new(""));
    let private = parent.join(format!(
        ".{}.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    // A directory of this name is a leftover of an earlier process with this id.
    let _ = std::fs::remove_dir_all(&private);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .map_err(|e| failed(format!("cannot create {}: {e}", private.display())))?;
    let made = listen_privately(&private.join("s"), path);
    let _ = std::fs::remove_dir_all(&private);
    let listener = made.map_err(failed)?;
    let meta = std::fs::symlink_metadata(path).map_err(|e| failed(e.to_string()))?;
    Ok((
        listener,
        Bound {
            path: path.to_owned(),
            file: (meta.dev(), meta.ino()),
        },
    ))
}

/// Listens at `temporary`, in a directory no other user can enter, sets the socket's mode, and
/// renames it onto `path`.
fn listen_privately(temporary: &Path, path: &Path) -> Result<UnixListener, String> {
    let listener = UnixListener::bind(temporary).map_err(|e| e.to_string())?;
    std::fs::set_permissions(temporary, std::fs::Permissions::from_mode(MODE))
        .map_err(|e| format!("cannot set its mode: {e}"))?;
    std::fs::rename(temporary, path).map_err(|e| e.to_string())?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;

    #[tokio::test]
    async fn the_socket_has_mode_0600_and_nothing_is_left_beside_it() {
        let dir = TempDir::new();
        let path = dir.path().join("signer.sock");
        let (_listener, bound) = bind(&path).await.unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let entries: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(entries, ["signer.sock"], "the private directory is gone");
        UnixStream::connect(&path).await.unwrap();
        bound.remove();
        assert!(!path.exists(), "the plugin removes its own socket");
    }

    #[tokio::test]
    async fn a_stale_socket_file_is_replaced() {
        let dir = TempDir::new();
        let path = dir.path().join("signer.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists(), "a listener dropped leaves its file");
        assert_eq!(
            UnixStream::connect(&path).await.unwrap_err().kind(),
            ErrorKind::ConnectionRefused
        );
        let (_listener, _bound) = bind(&path).await.unwrap();
        UnixStream::connect(&path).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[tokio::test]
    async fn a_path_another_process_serves_is_refused_and_kept() {
        let dir = TempDir::new();
        let path = dir.path().join("signer.sock");
        let (_listener, first) = bind(&path).await.unwrap();
        let refused = bind(&path).await.unwrap_err();
        assert!(matches!(&refused, SignerError::AlreadyServed { path: p } if *p == path));
        assert_eq!(
            refused.to_string(),
            format!(
                "another process is serving {}: stop it, or give another --socket",
                path.display()
            )
        );
        UnixStream::connect(&path).await.unwrap();
        first.remove();
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_socket_is_left_alone() {
        let dir = TempDir::new();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, "keep me").unwrap();
        assert!(matches!(
            bind(&path).await.unwrap_err(),
            SignerError::NotASocket { .. }
        ));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
    }

    #[tokio::test]
    async fn a_socket_replaced_by_another_plugin_is_not_removed() {
        let dir = TempDir::new();
        let path = dir.path().join("signer.sock");
        let (listener, first) = bind(&path).await.unwrap();
        drop(listener);
        let (_listener, second) = bind(&path).await.unwrap();
        first.remove();
        assert!(path.exists(), "the second plugin's socket stays");
        second.remove();
        assert!(!path.exists());
    }
}
