pub fn start_background() {
    tokio::spawn(async {});
}
