//! A real S3-compatible server for the tests: s3s with its file-system
//! backend, in process, on 127.0.0.1 with a random port. It checks request
//! signatures (presigned URLs included) against one access key. It can be
//! stopped (the port refuses connections, open ones are cut) and started
//! again on the same port, to test what happens while S3 is down.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::auth::SimpleAuth;
use s3s::service::{S3Service, S3ServiceBuilder};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

pub const ACCESS_KEY: &str = "ephemera-test";
pub const SECRET_KEY: &str = "ephemera-test-secret-key";
pub const BUCKET: &str = "ephemera-media";

pub struct S3Server {
    pub addr: SocketAddr,
    service: S3Service,
    task: Mutex<Option<JoinHandle<()>>>,
    /// Milliseconds each DELETE waits before it is served (0: none).
    delete_delay: Arc<AtomicU64>,
    root: tempfile::TempDir,
}

impl S3Server {
    /// Starts a server with an empty bucket.
    pub async fn start() -> Self {
        let root = tempfile::tempdir().expect("S3 root");
        std::fs::create_dir_all(root.path().join(BUCKET)).expect("bucket dir");
        let fs = s3s_fs::FileSystem::new(root.path()).expect("s3s-fs");
        let mut builder = S3ServiceBuilder::new(fs);
        builder.set_auth(SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = builder.build();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind S3");
        let addr = listener.local_addr().expect("S3 addr");
        let server = Self {
            addr,
            service,
            task: Mutex::new(None),
            delete_delay: Arc::new(AtomicU64::new(0)),
            root,
        };
        server.serve(listener);
        server
    }

    fn serve(&self, listener: TcpListener) {
        let service = self.service.clone();
        let delay = self.delete_delay.clone();
        let task = tokio::spawn(async move {
            // Dropping the set (when this task is aborted) cuts every connection.
            let mut connections = JoinSet::new();
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let service = service.clone();
                let delay = delay.clone();
                let slowed = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let service = service.clone();
                        let wait = Duration::from_millis(delay.load(Ordering::Relaxed));
                        let slow = req.method() == hyper::Method::DELETE && !wait.is_zero();
                        async move {
                            if slow {
                                tokio::time::sleep(wait).await;
                            }
                            hyper::service::Service::call(&service, req).await
                        }
                    },
                );
                connections.spawn(async move {
                    let _ = ConnBuilder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(socket), slowed)
                        .await;
                });
            }
        });
        *self.task.lock().unwrap() = Some(task);
    }

    /// Makes every DELETE wait `wait` first (a slow store: a media round
    /// then takes long enough to be interrupted).
    pub fn slow_deletes(&self, wait: Duration) {
        self.delete_delay.store(
            u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Where the object `key` is kept on disk (the file-system backend keeps
    /// each object as a file): to seed objects and to check they exist.
    pub fn object_path(&self, key: &str) -> PathBuf {
        self.root.path().join(BUCKET).join(key)
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops answering: the port is closed and open connections are cut.
    pub async fn stop(&self) {
        let task = self.task.lock().unwrap().take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
    }

    /// Starts answering again on the same port, with the same objects.
    pub async fn restart(&self) {
        let listener = TcpListener::bind(self.addr).await.expect("rebind S3");
        self.serve(listener);
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap().take() {
            task.abort();
        }
    }
}
