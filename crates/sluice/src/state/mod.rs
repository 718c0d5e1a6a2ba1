//! The versioned state store (`StateStore`, `StateStoreProvider`) under `<checkpoint>/state/`.
//! Arrives with issue 3.
