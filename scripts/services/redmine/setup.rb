# Prepares the test Redmine (run with `bin/rails runner` in production mode):
# enables the REST API, creates the statuses and workflow the e2e pipeline uses,
# and prints the admin's API key on the last line. Idempotent.
Setting.rest_api_enabled = '1'
Setting.text_formatting = 'common_mark'

admin = User.where(admin: true, status: User::STATUS_ACTIVE).order(:id).first
raise 'no active admin user' unless admin
admin.update_columns(must_change_passwd: false) if admin.must_change_passwd?

# Statuses of the e2e test pipeline (tests/redmine_e2e.rs). Closed and Rejected
# are Redmine's own closed statuses; the rest are created here if missing.
open_names = ['Ready for design', 'Designing', 'Design approved', 'Code review',
              'Design blocked', 'Blocked', 'QA failed']
open_names.each do |name|
  IssueStatus.find_or_create_by!(name: name) { |s| s.is_closed = false }
end
closed = IssueStatus.where(name: %w[Closed Rejected]).to_a
raise 'default statuses Closed/Rejected are missing' unless closed.size == 2
statuses = IssueStatus.where(name: open_names).to_a + closed

# The one transition the workflow forbids, for the refused-transition test.
forbidden = [IssueStatus.find_by!(name: 'Ready for design').id,
             IssueStatus.find_by!(name: 'Code review').id]

# Every other transition between these statuses (and creating an issue in any
# of them: old status 0) is allowed for every role and tracker.
Role.givable.each do |role|
  Tracker.all.each do |tracker|
    ([0] + statuses.map(&:id)).each do |from|
      statuses.each do |to|
        next if from == to.id || [from, to.id] == forbidden
        WorkflowTransition.find_or_create_by!(tracker_id: tracker.id, role_id: role.id,
                                              old_status_id: from, new_status_id: to.id,
                                              author: false, assignee: false)
      end
    end
    WorkflowTransition.where(tracker_id: tracker.id, role_id: role.id,
                             old_status_id: forbidden[0], new_status_id: forbidden[1]).delete_all
  end
end

puts "SORTIE_TEST_REDMINE_API_KEY=#{admin.api_key}"
