use super::*;
use std::sync::Arc;

fn memory(name: &str) -> String {
    let url = format!("memory://{name}-{}", uuid::Uuid::new_v4().simple());
    register_store(&url, Arc::new(object_store::memory::InMemory::new()));
    url
}

#[test]
fn local_paths_are_std_fs() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sub").join("0");
    assert!(!is_remote(&p));
    assert!(create_new(&p, b"first").unwrap());
    assert!(!create_new(&p, b"second").unwrap());
    assert_eq!(read(&p).unwrap(), b"first");
    let names: Vec<String> = list_dir(dir.path().join("sub"))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(
        names,
        vec!["0".to_string()],
        "no temporary file left behind"
    );
    write(&p, b"third").unwrap();
    assert_eq!(read_to_string(&p).unwrap(), "third");
    assert!(is_file(&p) && is_dir(dir.path().join("sub")));
}

#[test]
fn object_paths_create_once_list_and_delete() {
    let root = memory("ops");
    let p = PathBuf::from(format!("{root}/ck/offsets/0"));
    assert!(is_remote(&p));
    assert_eq!(
        list_dir(Path::new(&format!("{root}/ck")))
            .unwrap_err()
            .kind(),
        io::ErrorKind::NotFound
    );
    assert!(create_new(&p, b"v1").unwrap());
    assert!(!create_new(&p, b"v2").unwrap(), "the second create loses");
    assert_eq!(read(&p).unwrap(), b"v1");
    write(PathBuf::from(format!("{root}/ck/commits/0")), b"c").unwrap();
    let mut names: Vec<(String, bool)> = list_dir(Path::new(&format!("{root}/ck")))
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.is_dir))
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![("commits".to_string(), true), ("offsets".to_string(), true)]
    );
    let files = list_dir(Path::new(&format!("{root}/ck/offsets"))).unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].path, p);
    assert_eq!(files[0].size, 2);
    assert!(files[0].modified_ms > 0);
    assert!(is_dir(Path::new(&format!("{root}/ck"))) && is_file(&p));
    assert_eq!(
        remove_file(Path::new(&format!("{root}/ck/none")))
            .unwrap_err()
            .kind(),
        io::ErrorKind::NotFound
    );
    remove_dir_all(Path::new(&format!("{root}/ck"))).unwrap();
    assert!(!exists(&p));
}

#[test]
fn racing_creates_on_an_object_store_have_one_winner() {
    let root = memory("race");
    let p = PathBuf::from(format!("{root}/log/7"));
    let wins = (0..8)
        .map(|i| {
            let p = p.clone();
            std::thread::spawn(move || create_new(&p, format!("w{i}").as_bytes()).unwrap())
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|w| *w)
        .count();
    assert_eq!(wins, 1);
}

#[cfg(feature = "testing")]
#[test]
fn transient_failures_are_retried_and_counted_permanent_ones_name_the_path() {
    let url = format!("memory://faulty-{}", uuid::Uuid::new_v4().simple());
    let faulty = faulty::FaultyStore::new(Arc::new(object_store::memory::InMemory::new()));
    register_store(&url, faulty.clone());
    faulty.fail_every(2);
    let before = metrics().counts();
    for i in 0..10 {
        let p = PathBuf::from(format!("{url}/f/{i}"));
        assert!(create_new(&p, b"x").unwrap());
        assert_eq!(read(&p).unwrap(), b"x");
    }
    let after = metrics().counts().since(&before);
    assert!(faulty.injected() >= 10, "{}", faulty.injected());
    assert!(after.retries >= faulty.injected(), "{after:?}");
    faulty.fail_every(0);
    faulty.deny(Some("secret"));
    let err = read(Path::new(&format!("{url}/secret/0"))).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
    let text = err.to_string();
    assert!(
        text.contains(&format!("{url}/secret/0")) && text.contains("credentials"),
        "{text}"
    );
}

#[test]
fn a_url_without_a_bucket_is_refused() {
    let err = read(Path::new("s3:///key")).unwrap_err();
    assert!(err.to_string().contains("names its bucket"), "{err}");
}
