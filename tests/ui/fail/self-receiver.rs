use mcp_tasks_runtime::task_tool;

struct Service;

impl Service {
    #[task_tool]
    async fn deploy(&self, service: String) -> String {
        service
    }
}

fn main() {}
