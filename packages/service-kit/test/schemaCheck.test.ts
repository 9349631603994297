import t from 'tap'
import { parsePrismaSchema } from '../src/schemaCheck.ts'

const schema = `
enum Status {
  open
  closed

  @@map("status")
}

model Job {
  id        String @id
  context   Json   @default("{}")
  tags      String @default("{a}")
  status    Status
  createdAt DateTime @map("created_at")

  @@map("jobs")
}

model Step {
  id    Int    @id
  jobId String @map("job_id")
  job   Job    @relation(fields: [jobId], references: [id])
}
`

t.test('a } inside a field (@default("{}")) does not hide the fields after it', async (t) => {
  const { models, enums } = parsePrismaSchema(schema)
  t.same(
    models.map((m) => [m.name, m.table, m.fields.map((f) => f.column)]),
    [
      ['Job', 'jobs', ['id', 'context', 'tags', 'status', 'created_at']],
      ['Step', 'Step', ['id', 'job_id']],
    ],
  )
  t.equal(enums.get('Status'), 'status')
})
