//! An authoritative DNS server on loopback (hickory-server, UDP) holding the
//! TXT records a test gives it, for lexicon resolution: what
//! `gelstore lex resolve --dns ADDR` asks. Names outside its zones get
//! REFUSED, names inside without records NXDOMAIN, as a real server.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;

use hickory_server::ServerFuture;
use hickory_server::authority::{Catalog, ZoneType};
use hickory_server::proto::rr::rdata::{SOA, TXT};
use hickory_server::proto::rr::{LowerName, Name, RData, Record};
use hickory_server::store::in_memory::InMemoryAuthority;

/// A running server; it stops with the test process.
pub struct Dns {
    pub addr: SocketAddr,
}

/// Serves `zone` (e.g. `chat.`) with one TXT record per `(name, value)`.
pub fn start(zone: &str, txt: &[(&str, &str)]) -> Dns {
    let origin = Name::from_str(zone).unwrap();
    let mut authority = InMemoryAuthority::empty(origin.clone(), ZoneType::Primary, false);
    let soa = SOA::new(
        Name::from_str(&format!("ns.{zone}")).unwrap(),
        Name::from_str(&format!("admin.{zone}")).unwrap(),
        1,
        3600,
        600,
        86400,
        60,
    );
    authority.upsert_mut(Record::from_rdata(origin.clone(), 60, RData::SOA(soa)), 1);
    for (name, value) in txt {
        let name = Name::from_str(&format!("{name}.")).unwrap();
        let rdata = RData::TXT(TXT::new(vec![(*value).to_owned()]));
        authority.upsert_mut(Record::from_rdata(name, 60, rdata), 1);
    }
    let mut catalog = Catalog::new();
    catalog.upsert(LowerName::new(&origin), vec![Arc::new(authority)]);
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_nonblocking(true).unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut server = ServerFuture::new(catalog);
            server.register_socket(tokio::net::UdpSocket::from_std(socket).unwrap());
            let _ = server.block_until_done().await;
        });
    });
    Dns { addr }
}
